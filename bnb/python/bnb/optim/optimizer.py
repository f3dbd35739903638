"""The optimizers' machinery, as bitsandbytes 0.50 has it: Optimizer8bit (a torch.optim.Optimizer that makes each
parameter's state at its first update and applies the per-parameter overrides of GlobalOptimManager), and
Optimizer2State / Optimizer1State, which update a parameter with torch.ops.bnb.optimizer_update_32bit (float32
state) or optimizer_update_8bit_blockwise (uint8 codes with a float32 scale per block of 256).

A parameter gets 8-bit state where optim_bits is 8 and it has at least min_8bit_size elements (4096 by default);
smaller ones (biases, norms) keep 32-bit state. The state's dtype, not the configuration, decides each update, so a
loaded state dict's state is used as it is.

Under torch.compile each parameter's update is one call of an opaque custom op, one node of the graph. The step
count and the hyperparameters reach the op as Python numbers (its schema's int and float arguments, as
bitsandbytes'), so dynamo specializes each step's graph on the step count and compiles it again at the next step,
until its recompile limit (8 by default) sends that frame back to eager execution; results are the same either way.
max_unorm > 0 and percentile_clipping < 100 read values off the device (a graph break each).
"""

from __future__ import annotations

from collections import defaultdict
from copy import deepcopy
from itertools import chain
from typing import Any, Optional

import torch

from .. import functional as F
from . import checks, paged
from . import state_dict as sd
from .manager import GlobalOptimManager

__all__ = ["GlobalOptimManager", "MockArgs", "Optimizer8bit", "Optimizer2State", "Optimizer1State"]

TWO_STATE = ("adam", "lamb", "ademamix")
ONE_STATE = ("momentum", "lars", "rmsprop", "adagrad", "lion")


class MockArgs:
    """The optimizer's own arguments as attributes (bitsandbytes' `args`)."""

    def __init__(self, initial_data: dict):
        for key, value in initial_data.items():
            setattr(self, key, value)


def fixed_bits(owner: str, given: Any, default: int, fixed: int) -> None:
    """An ...8bit / ...32bit class keeps bitsandbytes' optim_bits argument, fixed: anything but its default is an
    error (bitsandbytes ignores it in the 32-bit classes)."""
    if given != default:
        checks.fail(owner, f"optim_bits is fixed at {fixed} for {owner}; leave it at its default {default}, got "
                           f"{given!r}")


def refuse(owner: str, cond: bool, message: str) -> None:
    """An argument bitsandbytes takes and ignores (or rejects): bnb refuses it where it would change the update."""
    if cond:
        checks.fail(owner, message)


class Optimizer8bit(torch.optim.Optimizer):
    """Base of bnb's optimizers (module doc): the state layout of a subclass is set by _two_states (state2 too)
    and _halves (2: state1 holds two states); self.optimizer_name names the op's update."""

    _FSDP_WRAPPED_QUANT_STATE_KEY = sd.WRAP_KEY
    _two_states = False
    _halves = 1  # 2 for AdEMAMix, whose state1 holds two states
    _beta_names: Optional[tuple] = None

    def __init__(self, params, defaults: dict, optim_bits: int = 32, is_paged: bool = False):
        super().__init__(params, defaults)
        self.initialized = False
        self.name2qmap: dict[str, torch.Tensor] = {}
        self.is_paged = is_paged
        self.mng = GlobalOptimManager.get_instance()
        self.non_castable_tensor_keys = set(sd.WRAPPED_KEYS)
        if optim_bits == 8:
            self.fill_qmap()

    @property
    def _owner(self) -> str:
        return type(self).__name__

    def fill_qmap(self) -> None:
        """bitsandbytes' codebooks of the 8-bit states: signed dynamic for state1 (of every optimizer, rmsprop's
        and adagrad's non-negative state too, as bitsandbytes has it), unsigned dynamic for state2."""
        self.name2qmap["dynamic"] = F.create_dynamic_map(signed=True)
        self.name2qmap["udynamic"] = F.create_dynamic_map(signed=False)

    def _qmap(self, name: str, device: torch.device) -> torch.Tensor:
        if name not in self.name2qmap:
            self.fill_qmap()
        self.name2qmap[name] = self.name2qmap[name].to(device)
        return self.name2qmap[name]

    # ----- configuration -------------------------------------------------------------------------------------------

    def _beta_names_for(self, optimizer_name: str) -> tuple:
        if self._beta_names is not None:
            return self._beta_names
        return tuple(f"betas[{i}]" for i in range(3 if optimizer_name == "ademamix" else 2))

    def _check_common(self, owner: str, optimizer_name: str, known: tuple, kind: str, lr, eps, weight_decay) -> None:
        """The checks both bases make first: a name of their kind, lr, eps and weight_decay >= 0. Sets
        optimizer_name."""
        if optimizer_name not in known:
            checks.fail(owner, f"optimizer_name {optimizer_name!r} is not a {kind} optimizer; expected one of "
                               f"{', '.join(known)}")
        self.optimizer_name = optimizer_name
        checks.at_least_zero(owner, "lr", lr)
        checks.at_least_zero(owner, "eps", eps)
        checks.at_least_zero(owner, "weight_decay", weight_decay)

    def _set_args(self, args, optim_bits, min_8bit_size, max_unorm, skip_zeros, percentile_clipping, block_wise):
        """self.args: the given `args` object (its missing attributes at their defaults) or these arguments."""
        own = dict(optim_bits=optim_bits, min_8bit_size=min_8bit_size, max_unorm=max_unorm, skip_zeros=skip_zeros,
                   percentile_clipping=percentile_clipping, block_wise=block_wise)
        if args is None:
            self.args = MockArgs(own)
        else:
            self.args = args
            for key, value in own.items():
                if not hasattr(args, key):
                    setattr(args, key, value)
        a = self.args
        checks.optim_bits(self._owner, a.optim_bits)
        checks.min_8bit_size(self._owner, a.min_8bit_size)
        checks.at_least_zero(self._owner, "max_unorm", a.max_unorm)
        checks.percentile(self._owner, a.percentile_clipping)
        if not isinstance(a.skip_zeros, bool):
            checks.fail(self._owner, f"skip_zeros must be a bool, got {a.skip_zeros!r}")
        if a.block_wise is not True:
            checks.fail(self._owner, f"block_wise={a.block_wise!r} (one scale per tensor for 8-bit state) is not "
                                     f"supported: bnb's 8-bit state is blockwise (blocks of 256), the only form "
                                     f"bitsandbytes 0.50 has")

    def get_config(self, gindex: int, pindex: int, group: dict) -> dict:
        """A parameter's configuration: its group's hyperparameters, the optimizer's arguments, then the
        GlobalOptimManager's overrides (by position, then by the tensor itself)."""
        config = {
            "betas": group["betas"], "eps": group["eps"], "weight_decay": group["weight_decay"], "lr": group["lr"],
            "alpha": group.get("alpha", 0.0), "t_alpha": group.get("t_alpha"), "t_beta3": group.get("t_beta3"),
            "optim_bits": self.args.optim_bits, "min_8bit_size": self.args.min_8bit_size,
            "max_unorm": self.args.max_unorm, "skip_zeros": self.args.skip_zeros,
            "percentile_clipping": self.args.percentile_clipping,
        }
        if (gindex, pindex) in self.mng.index2config:
            config.update(self.mng.index2config[(gindex, pindex)])
        p = self.param_groups[gindex]["params"][pindex]
        if id(p) in self.mng.pid2config:
            config.update(self.mng.pid2config[id(p)])
        return config

    def check_overrides(self) -> None:
        """Applies register_module_override's overrides to the parameters they name."""
        for module, attr, config in self.mng.module_weight_config_triple:
            target = getattr(module, attr, None)
            if not isinstance(target, torch.Tensor):
                checks.fail(self._owner, f"register_module_override: {type(module).__name__}.{attr} is not a "
                                         f"tensor (got {type(target).__name__})")
            if any(p is target for group in self.param_groups for p in group["params"]):
                # By the tensor only: bitsandbytes also records the position (group, index), where every other
                # optimizer's parameter at that position would take the override too.
                self.mng.pid2config.setdefault(id(target), {}).update(config)

    # ----- state ---------------------------------------------------------------------------------------------------

    def get_state_buffer(self, p: torch.Tensor, dtype: torch.dtype = torch.float32, shape=None) -> torch.Tensor:
        """A zeroed state buffer of p's shape (or `shape`) on p's device; paged: bnb.optim.paged."""
        return paged.state_buffer(self._owner, p.shape if shape is None else shape, dtype, p.device, self.is_paged)

    def prefetch_state(self, p: torch.Tensor, prefetcher: Optional[paged.Prefetcher] = None) -> None:
        """Paged: starts moving p's state in managed memory to its GPU, ahead of its update, within `prefetcher`'s
        budget of free device memory (a fresh one if None; bnb.optim.paged)."""
        if self.is_paged and p.device.type == "cuda":
            (prefetcher or paged.Prefetcher())((self.state[p].get("state1"), self.state[p].get("state2")))

    def to_gpu(self) -> None:
        """Moves the state of parameters off the CPU to their device (a state dict loaded with
        move_to_device=False)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.device.type != "cpu" and p in self.state:
                    for key, value in self.state[p].items():
                        if isinstance(value, torch.Tensor):
                            self.state[p][key] = value.to(p.device)

    def init_state(self, group: dict, p: torch.Tensor, gindex: int, pindex: int) -> None:
        """Makes p's state (zeros) by its configuration: 8-bit where optim_bits is 8 and p has at least
        min_8bit_size elements, else 32-bit."""
        config = self.get_config(gindex, pindex, group)
        checks.config(self._owner, config, self._beta_names_for(self.optimizer_name))
        eight_bit = config["optim_bits"] == 8 and p.numel() >= config["min_8bit_size"]
        dtype = torch.uint8 if eight_bit else torch.float32
        state = self.state[p]
        state["step"] = 0
        halves = self._halves
        blocks = -(-p.numel() // sd.BLOCKSIZE)
        state["state1"] = self.get_state_buffer(p, dtype, (halves, *p.shape) if halves == 2 else p.shape)
        if self._two_states:
            state["state2"] = self.get_state_buffer(p, dtype)
        if eight_bit:
            state["qmap1"] = self._qmap("dynamic", p.device)
            state["absmax1"] = torch.zeros((halves, blocks) if halves == 2 else (blocks,), device=p.device)
            if self._two_states:
                state["qmap2"] = self._qmap("udynamic", p.device)
                state["absmax2"] = torch.zeros((blocks,), device=p.device)
        if config["percentile_clipping"] < 100:
            state["gnorm_vec"] = torch.zeros((100,), device=p.device)
        if config["max_unorm"] > 0.0:
            state["unorm_vec"] = torch.zeros((1,), device=p.device)

    # ----- the update ----------------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient; `closure` re-evaluates the loss (returned)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self.initialized:
            self.check_overrides()
            self.to_gpu()
            self.initialized = True
        # One budget of free device memory for the step's prefetches (bnb.optim.paged.Prefetcher).
        prefetcher = paged.Prefetcher() if self.is_paged else None
        for gindex, group in enumerate(self.param_groups):
            for pindex, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                if len(self.state[p]) == 0:
                    self.init_state(group, p, gindex, pindex)
                if prefetcher is not None:
                    self.prefetch_state(p, prefetcher)
                self.update_step(group, p, gindex, pindex)
        return loss

    def _gnorm_scale(self, grad: torch.Tensor, state: dict, config: dict, step: int) -> float:
        """percentile_clipping: the gradient's scale by its norm against the last 100 steps' (bitsandbytes'
        definition, bnb.functional.percentile_clipping); 1 when off. A history that is all zeros (new, or missing
        from a loaded state dict) is filled with this step's norm, as at step 1."""
        percentile = config["percentile_clipping"]
        if percentile >= 100:
            return 1.0
        gnorm_vec = state.get("gnorm_vec")
        if gnorm_vec is None:
            gnorm_vec = state["gnorm_vec"] = torch.zeros((100,), device=grad.device)
        history_step = step if step > 1 and bool(gnorm_vec.any()) else 1
        return F.percentile_clipping(grad, gnorm_vec, history_step, percentile)[2]

    def _beta3_alpha(self, config: dict, step: int) -> tuple[float, float]:
        """beta3 and alpha of this step (AdEMAMix schedules them)."""
        betas = config["betas"]
        return (betas[2] if len(betas) >= 3 else 0.0), config.get("alpha", 0.0)

    def update_step(self, group: dict, p: torch.Tensor, gindex: int, pindex: int) -> None:
        """One update of p with its gradient (one op call), without autograd. step() calls it with grad already
        off, so it enters no_grad only when called with grad on (a decorator would enter it for every parameter of
        every step)."""
        if torch.is_grad_enabled():  # called directly, as bitsandbytes' subclasses may
            with torch.no_grad():
                return self.update_step(group, p, gindex, pindex)
        if p.grad.is_sparse:
            checks.fail(self._owner, f"sparse gradients are not supported (parameter of shape {list(p.shape)})")
        if not p.is_contiguous():
            p.data = p.data.contiguous()
        if not p.grad.is_contiguous():
            p.grad = p.grad.contiguous()
        grad = p.grad
        state = self.state[p]
        config = self.get_config(gindex, pindex, group)
        state["step"] += 1
        step = state["step"]
        gnorm_scale = self._gnorm_scale(grad, state, config, step)
        betas = config["betas"]
        beta3, alpha = self._beta3_alpha(config, step) if self._two_states else (0.0, 0.0)
        if state["state1"].dtype == torch.float32:
            unorm_vec = None
            if config["max_unorm"] > 0.0:
                unorm_vec = state.get("unorm_vec")
                if unorm_vec is None:  # a state made or loaded without update-norm clipping
                    unorm_vec = state["unorm_vec"] = torch.zeros((1,), device=p.device)
            F.optimizer_update_32bit(
                self.optimizer_name, grad, p, state["state1"], betas[0], config["eps"], step, config["lr"],
                state.get("state2"), betas[1], beta3, alpha, config["weight_decay"], gnorm_scale, unorm_vec,
                max_unorm=config["max_unorm"], skip_zeros=config["skip_zeros"])
        else:
            F.optimizer_update_8bit_blockwise(
                self.optimizer_name, grad, p, state["state1"], state.get("state2"), betas[0], betas[1], beta3,
                alpha, config["eps"], step, config["lr"], state["qmap1"], state.get("qmap2"), state["absmax1"],
                state.get("absmax2"), config["weight_decay"], gnorm_scale=gnorm_scale,
                skip_zeros=config["skip_zeros"])

    # ----- state dicts ---------------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """torch.optim's state dict with each parameter's state tensors under "__bnb_optimizer_quant_state__", as
        bitsandbytes 0.50 writes it (bnb.optim.state_dict)."""
        out = super().state_dict()
        out["state"] = sd.wrap(out["state"])
        return out

    def _check_group(self, index: int, group: dict) -> None:
        owner = f"{self._owner}: load_state_dict: param_groups[{index}]"
        for key in ("lr", "betas", "eps", "weight_decay"):
            if key not in group:
                checks.fail(owner, f"has no '{key}'")
        checks.at_least_zero(owner, "lr", group["lr"])
        checks.at_least_zero(owner, "eps", group["eps"])
        checks.at_least_zero(owner, "weight_decay", group["weight_decay"])
        group["betas"] = checks.parse_betas(owner, group["betas"], self._beta_names_for(self.optimizer_name))
        checks.at_least_zero(owner, "alpha", group.get("alpha", 0.0))
        checks.schedule(owner, "t_alpha", group.get("t_alpha"))
        checks.schedule(owner, "t_beta3", group.get("t_beta3"))

    def load_state_dict(self, state_dict: dict, move_to_device: bool = True) -> None:
        """Loads a state dict of bnb's or bitsandbytes' (either layout, bnb.optim.state_dict), after checking all of
        it: a wrong key, dtype, shape or hyperparameter is a ValueError naming it and what was expected, and
        leaves the optimizer as it was. The state is copied (never shared with `state_dict`) to each parameter's
        device (move_to_device) or kept where it is."""
        owner = self._owner
        if not isinstance(state_dict, dict):
            checks.fail(owner, f"load_state_dict: expected a dict, got {type(state_dict).__name__}")
        state_dict = dict(state_dict)
        for hook in getattr(self, "_optimizer_load_state_dict_pre_hooks", {}).values():
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        for key in ("state", "param_groups"):
            if key not in state_dict:
                checks.fail(owner, f"load_state_dict: the state dict has no '{key}' (keys: "
                                   f"{', '.join(map(str, state_dict))})")
        if not isinstance(state_dict["state"], dict):
            checks.fail(owner, f"load_state_dict: 'state' must be a dict of parameter index to state, got "
                               f"{type(state_dict['state']).__name__}")
        groups = self.param_groups
        saved_groups = state_dict["param_groups"]
        if not isinstance(saved_groups, (list, tuple)) or not all(
                isinstance(s, dict) and isinstance(s.get("params"), (list, tuple)) for s in saved_groups):
            checks.fail(owner, "load_state_dict: 'param_groups' must be a list of dicts, each with a 'params' list")
        saved_groups = deepcopy(saved_groups)
        if len(groups) != len(saved_groups):
            checks.fail(owner, f"load_state_dict: the state dict has {len(saved_groups)} parameter groups, the "
                               f"optimizer {len(groups)}")
        for i, (g, s) in enumerate(zip(groups, saved_groups)):
            if len(g["params"]) != len(s["params"]):
                checks.fail(owner, f"load_state_dict: param_groups[{i}] has {len(s['params'])} parameters in the "
                                   f"state dict, {len(g['params'])} in the optimizer")
        new_groups = []
        for i, (g, s) in enumerate(zip(groups, saved_groups)):
            merged = {k: v for k, v in g.items() if k != "params"}
            merged.update(s)
            merged["params"] = g["params"]
            if "param_names" in g and "param_names" not in s:
                merged["param_names"] = g["param_names"]
            self._check_group(i, merged)
            new_groups.append(merged)
        id_map = dict(zip(chain.from_iterable(s["params"] for s in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)))
        state: defaultdict = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key not in id_map:  # not a parameter's: kept as it is (torch.optim does so too)
                state[key] = deepcopy(value)
                continue
            p = id_map[key]
            try:
                checked = sd.check_param_state(owner, key, p, value, self._two_states, self._halves)
            except ValueError as e:
                if str(e).startswith("bnb.optim."):
                    raise
                checks.fail(owner, f"load_state_dict: state of parameter {key}: {e}")
            state[p] = {k: (v.to(p.device, copy=True) if move_to_device else v.clone())
                        if isinstance(v, torch.Tensor) else v for k, v in checked.items()}
        self.__setstate__({"state": state, "param_groups": new_groups})
        for hook in getattr(self, "_optimizer_load_state_dict_post_hooks", {}).values():
            hook(self)


class Optimizer2State(Optimizer8bit):
    """Base of the two-state optimizers (adam, lamb, ademamix): state1 the first moment(s), state2 the second."""

    _two_states = True

    def __init__(self, optimizer_name: str, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 optim_bits=32, args=None, min_8bit_size=4096, max_unorm=0.0, skip_zeros=False, is_paged=False,
                 alpha=0.0, t_alpha: Optional[int] = None, t_beta3: Optional[int] = None, *,
                 percentile_clipping: int = 100, block_wise: bool = True):
        owner = type(self).__name__
        self._check_common(owner, optimizer_name, TWO_STATE, "two-state", lr, eps, weight_decay)
        checks.at_least_zero(owner, "alpha", alpha)
        checks.schedule(owner, "t_alpha", t_alpha)
        checks.schedule(owner, "t_beta3", t_beta3)
        betas = checks.parse_betas(owner, betas, self._beta_names_for(optimizer_name))
        if optimizer_name != "ademamix" and (t_alpha is not None or t_beta3 is not None):
            checks.fail(owner, f"t_alpha and t_beta3 schedule AdEMAMix's alpha and beta3; {optimizer_name} has "
                               f"neither, got t_alpha={t_alpha!r}, t_beta3={t_beta3!r}")
        if t_beta3 is not None and (betas[0] == 0.0 or betas[2] == 0.0):
            checks.fail(owner, f"t_beta3 schedules beta3 between betas[0] and betas[2] by their logarithms: both must "
                               f"be > 0, got {betas}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, alpha=alpha, t_alpha=t_alpha,
                        t_beta3=t_beta3)
        checks.optim_bits(owner, optim_bits)
        super().__init__(params, defaults, optim_bits, is_paged)
        self._set_args(args, optim_bits, min_8bit_size, max_unorm, skip_zeros, percentile_clipping, block_wise)


class Optimizer1State(Optimizer8bit):
    """Base of the one-state optimizers (momentum, lars, rmsprop, adagrad, lion)."""

    def __init__(self, optimizer_name: str, params, lr=1e-3, betas=(0.9, 0.0), eps=1e-8, weight_decay=0.0,
                 optim_bits=32, args=None, min_8bit_size=4096, max_unorm=0.0, skip_zeros=False, is_paged=False, *,
                 percentile_clipping: int = 100, block_wise: bool = True):
        owner = type(self).__name__
        self._check_common(owner, optimizer_name, ONE_STATE, "one-state", lr, eps, weight_decay)
        betas = checks.parse_betas(owner, betas, self._beta_names_for(optimizer_name))
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        checks.optim_bits(owner, optim_bits)
        super().__init__(params, defaults, optim_bits, is_paged)
        self._set_args(args, optim_bits, min_8bit_size, max_unorm, skip_zeros, percentile_clipping, block_wise)
