"""peft's QLoRA recipe on bnb through the companion `bitsandbytes`: LoRA over an NF4 model prepared with
prepare_model_for_kbit_training, trained a few steps with torch's AdamW, bnb.optim.PagedAdamW8bit and transformers'
Trainer(optim="paged_adamw_8bit"); merge_and_unload() against an independent merge. A small random Llama."""

import pytest
import torch

from hf_helpers import TARGETS, import_stack, save_tiny_llama, token_ids

transformers, peft, accelerate = import_stack()

import bnb  # noqa: E402
from bnb import functional as F  # noqa: E402
from helpers import assert_same_bits  # noqa: E402
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training  # noqa: E402
from transformers import BitsAndBytesConfig, LlamaForCausalLM, Trainer, TrainingArguments  # noqa: E402

STEPS = 8
BATCH = token_ids(4, 32, seed=2)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("llama"))


def qlora(model_dir):
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                bnb_4bit_compute_dtype=torch.float32)
    model = LlamaForCausalLM.from_pretrained(model_dir, quantization_config=config, device_map="cpu")
    model = prepare_model_for_kbit_training(model)
    torch.manual_seed(0)
    # lora_dropout 0: the losses depend on the weights alone, so two optimizers' runs can be compared.
    return get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0,
                                            task_type="CAUSAL_LM"))


def train(model, optimizer) -> list:
    model.train()
    losses = []
    for _ in range(STEPS):
        loss = model(input_ids=BATCH, labels=BATCH).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def trainable(model) -> list:
    params = [p for p in model.parameters() if p.requires_grad]
    assert params and all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    return params


def assert_learns(losses):
    # Random labels over 512 tokens start at ln(512) = 6.24; 8 steps at lr 1e-2 reach 5.17 (measured:
    # torch AdamW 5.171, PagedAdamW8bit with 8-bit state 5.172, Trainer paged_adamw_8bit 5.178).
    assert losses[0] == pytest.approx(6.24, abs=0.1), losses
    assert losses[-1] < losses[0] - 0.5 and losses == sorted(losses, reverse=True), losses


def test_qlora_with_torch_adamw_lowers_the_loss(model_dir):
    model = qlora(model_dir)
    base = model.base_model.model.model.layers[0].self_attn.q_proj.base_layer
    assert isinstance(base, bnb.nn.Linear4bit) and not base.weight.requires_grad
    packed = base.weight.data.clone()
    assert_learns(train(model, torch.optim.AdamW(trainable(model), lr=1e-2)))
    assert torch.equal(base.weight.data, packed)  # only the adapters learn


def test_qlora_with_paged_adamw_8bit_lowers_the_loss_with_8bit_state(model_dir):
    model = qlora(model_dir)
    params = trainable(model)
    # min_8bit_size 512: the rank-8 adapters (1024 to 2048 elements) get 8-bit state, not the 32-bit fallback.
    optimizer = bnb.optim.PagedAdamW8bit(params, lr=1e-2, min_8bit_size=512)
    assert_learns(train(model, optimizer))
    state = optimizer.state[params[0]]
    assert state["state1"].dtype == torch.uint8 and state["state2"].dtype == torch.uint8, {
        k: getattr(v, "dtype", v) for k, v in state.items()}


def test_trainer_with_optim_paged_adamw_8bit_runs_bnb_and_lowers_the_loss(model_dir, tmp_path):
    model = qlora(model_dir)

    class Batches(torch.utils.data.Dataset):
        def __len__(self):
            return len(BATCH)

        def __getitem__(self, i):
            return {"input_ids": BATCH[i], "labels": BATCH[i]}

    args = TrainingArguments(output_dir=str(tmp_path), optim="paged_adamw_8bit", learning_rate=1e-2,
                             lr_scheduler_type="constant", per_device_train_batch_size=len(BATCH), max_steps=STEPS,
                             logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Batches())
    trainer.train()
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate wraps it
    # Trainer makes bitsandbytes.optim.AdamW(optim_bits=8, is_paged=True), what PagedAdamW8bit is.
    assert isinstance(optimizer, bnb.optim.AdamW), type(optimizer)
    assert optimizer.args.optim_bits == 8 and optimizer.is_paged
    assert type(optimizer).__module__ == "bitsandbytes.optim"  # Trainer's 8-bit embedding override keys on the name
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == STEPS
    assert_learns(losses)


def test_merge_and_unload_equals_an_independent_merge_of_the_dequantized_weights(model_dir):
    model = qlora(model_dir)
    train(model, torch.optim.AdamW(trainable(model), lr=1e-2))
    model.eval()
    with torch.no_grad():
        model(BATCH)  # an eval forward first: bitsandbytes' CPU path merged wrong weights after one
    # peft's merge: W' = NF4(dequantize(W) + B A * alpha / r), requantized with W's own settings.
    expected = {}
    for name, module in model.named_modules():
        if isinstance(module, peft.tuners.lora.bnb.Linear4bit):
            weight = module.base_layer.weight
            delta = (module.lora_B["default"].weight @ module.lora_A["default"].weight) * module.scaling["default"]
            merged = F.dequantize_4bit(weight.data, weight.quant_state) + delta.detach()
            packed, state = F.quantize_4bit(merged, blocksize=weight.blocksize, compress_statistics=True,
                                            quant_type="nf4")
            expected[name.removeprefix("base_model.model.")] = F.dequantize_4bit(packed, state)
    assert len(expected) == 14
    with pytest.warns(UserWarning, match="rounding errors"):
        merged_model = model.merge_and_unload()
    for name, weight in expected.items():
        layer = merged_model.get_submodule(name)
        assert isinstance(layer, bnb.nn.Linear4bit), (name, type(layer))
        assert_same_bits(F.dequantize_4bit(layer.weight.data, layer.weight.quant_state), weight)
