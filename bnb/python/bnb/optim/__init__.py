"""bnb.optim: bitsandbytes 0.50's optimizers, with 32-bit or 8-bit blockwise state (uint8 codes into the dynamic map
and a float32 scale per block of 256: a quarter of the memory of 32-bit state), over torch.ops.bnb.optimizer_update_*.

    opt = bnb.optim.AdamW8bit(model.parameters(), lr=1e-3)   # as torch.optim.AdamW, state in 8 bits

Adam / AdamW / LAMB / AdEMAMix (two states), SGD / LARS / RMSprop / Adagrad / Lion (one), each as ...8bit, ...32bit
and the plain class (optim_bits picks); Paged... variants of Adam, AdamW, Lion and AdEMAMix; GlobalOptimManager for
per-parameter overrides (bnb.optim.manager); PytorchLARS. Parameters smaller than min_8bit_size (4096) keep 32-bit
state. State dicts are bitsandbytes' (bnb.optim.state_dict): either loads into the other.

Differences from bitsandbytes 0.50, each deliberate:
- percentile_clipping (100-step gradient-norm history, bnb.functional.percentile_clipping) and block_wise are here,
  as keyword-only arguments (bitsandbytes 0.45 had them; 0.50 dropped both). block_wise=False (one scale per
  tensor) is an error: 8-bit state is blockwise only.
- Paged state (bnb.optim.paged): on CUDA, as bitsandbytes, unified memory prefetched before each update, and only
  as far as the device has memory free; where the GPU has no managed memory, ordinary device memory checked against
  the free memory first (one warning); on the CPU and other devices paging means nothing.
- Arguments bitsandbytes takes and silently ignores are errors where they would change the update: amsgrad=True,
  LAMB's bias_correction=False / adam_w_mode=False, SGD's and LARS's dampening != 0 / nesterov=True, RMSprop's
  momentum != 0, and an optim_bits other than the default in the ...8bit / ...32bit classes.
- Errors name the optimizer, the argument, the value and what was expected; overrides are checked (unknown keys
  and bad optim_bits at override_config, the merged values when the parameter's state is made).
- load_state_dict checks everything it loads (keys, dtypes, shapes, codebooks, block scales, hyperparameters)
  before changing anything, copies the tensors (never shares them with the state dict), and fills in what a
  bitsandbytes state dict may lack: gnorm_vec and unorm_vec are made when first needed.
- register_module_override's override applies to that tensor only and merges into its other overrides
  (bitsandbytes replaces them, and also records the parameter's position, where the parameter of any other
  optimizer at that position took the override too); override_config keeps a dict per parameter (bitsandbytes
  shares one among the parameters given).
- AdEMAMix32bit keeps AdEMAMix's [2, *shape] state1 (it derives from AdEMAMix).
- No CUDA synchronization after each parameter's update (bitsandbytes synchronizes there).
"""

from .adagrad import Adagrad, Adagrad8bit, Adagrad32bit
from .adam import Adam, Adam8bit, Adam32bit, PagedAdam, PagedAdam8bit, PagedAdam32bit
from .adamw import AdamW, AdamW8bit, AdamW32bit, PagedAdamW, PagedAdamW8bit, PagedAdamW32bit
from .ademamix import AdEMAMix, AdEMAMix8bit, AdEMAMix32bit, PagedAdEMAMix, PagedAdEMAMix8bit, PagedAdEMAMix32bit
from .lamb import LAMB, LAMB8bit, LAMB32bit
from .lars import LARS, LARS8bit, LARS32bit, PytorchLARS
from .lion import Lion, Lion8bit, Lion32bit, PagedLion, PagedLion8bit, PagedLion32bit
from .manager import GlobalOptimManager
from .optimizer import Optimizer1State, Optimizer2State, Optimizer8bit
from .rmsprop import RMSprop, RMSprop8bit, RMSprop32bit
from .sgd import SGD, SGD8bit, SGD32bit

__all__ = [
    "Adagrad", "Adagrad8bit", "Adagrad32bit",
    "Adam", "Adam8bit", "Adam32bit", "PagedAdam", "PagedAdam8bit", "PagedAdam32bit",
    "AdamW", "AdamW8bit", "AdamW32bit", "PagedAdamW", "PagedAdamW8bit", "PagedAdamW32bit",
    "AdEMAMix", "AdEMAMix8bit", "AdEMAMix32bit", "PagedAdEMAMix", "PagedAdEMAMix8bit", "PagedAdEMAMix32bit",
    "LAMB", "LAMB8bit", "LAMB32bit",
    "LARS", "LARS8bit", "LARS32bit", "PytorchLARS",
    "Lion", "Lion8bit", "Lion32bit", "PagedLion", "PagedLion8bit", "PagedLion32bit",
    "RMSprop", "RMSprop8bit", "RMSprop32bit",
    "SGD", "SGD8bit", "SGD32bit",
    "GlobalOptimManager", "Optimizer8bit", "Optimizer2State", "Optimizer1State",
]
