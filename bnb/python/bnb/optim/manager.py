"""GlobalOptimManager: per-parameter overrides of an optimizer's configuration (bitsandbytes' API), e.g. 32-bit state
for an embedding while the rest of the model keeps 8-bit state.

Parameters are known by id(): an override set on a tensor applies to that tensor. register_parameters(), called
while the model is still where it was made, also records the overrides by position (group index, parameter index),
so that they survive a move that makes new tensors (tensor.to(device) for a plain tensor; Module.to() keeps the
Parameter objects); as in bitsandbytes, such a position applies to every optimizer's parameter at it. Only
overrides set before register_parameters are recorded so. register_module_override(module, "weight", config)
applies to that tensor at the optimizer's first step.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import torch

from . import checks

# What an override may set: the group's hyperparameters and the optimizer's arguments.
CONFIG_KEYS = ("lr", "betas", "eps", "weight_decay", "alpha", "t_alpha", "t_beta3", "optim_bits", "min_8bit_size",
               "max_unorm", "skip_zeros", "percentile_clipping")


def _check_keys(where: str, config: dict) -> None:
    if not isinstance(config, dict):
        checks.fail(where, f"an override is a dict of config keys to values, got {type(config).__name__}")
    unknown = sorted(str(k) for k in config if k not in CONFIG_KEYS)
    if unknown:
        checks.fail(where, f"unknown config key(s) {', '.join(map(repr, unknown))}; expected any of "
                           f"{', '.join(CONFIG_KEYS)}")
    if "optim_bits" in config:
        checks.optim_bits(where, config["optim_bits"])


class GlobalOptimManager:
    """The process-wide manager of per-parameter optimizer overrides (get_instance(); never constructed)."""

    _instance: Optional["GlobalOptimManager"] = None

    def __init__(self):
        raise RuntimeError("bnb.optim.GlobalOptimManager: call GlobalOptimManager.get_instance() instead")

    def initialize(self) -> None:
        """Forgets every override."""
        self.pid2config: dict[int, dict] = {}
        self.index2config: dict[tuple[int, int], dict] = {}
        self.optimizer = None
        self.uses_config_override = False
        self.module_weight_config_triple: list[tuple[torch.nn.Module, str, dict]] = []

    @classmethod
    def get_instance(cls) -> "GlobalOptimManager":
        if cls._instance is None:
            cls._instance = cls.__new__(cls)
            cls._instance.initialize()
        return cls._instance

    def register_parameters(self, params: Iterable) -> None:
        """Records, by position, the overrides of the parameters in `params` (tensors or param-group dicts, as an
        optimizer takes them)."""
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for gindex, group in enumerate(groups):
            group_params = group["params"]
            group_params = [group_params] if isinstance(group_params, torch.Tensor) else list(group_params)
            for pindex, p in enumerate(group_params):
                if id(p) in self.pid2config:
                    self.index2config[(gindex, pindex)] = self.pid2config[id(p)]

    def override_config(self, parameters, key: Optional[str] = None, value: Any = None,
                        key_value_dict: Optional[dict] = None) -> None:
        """Overrides the configuration of `parameters` (a tensor or a list of them): one `key` and `value`, or
        several in `key_value_dict`. Keys: CONFIG_KEYS, e.g. override_config(emb.weight, "optim_bits", 32)."""
        where = "GlobalOptimManager.override_config"
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        if key is not None:
            if key_value_dict is not None:
                checks.fail(where, "give either key and value or key_value_dict, not both")
            if value is None:
                checks.fail(where, f"key {key!r} needs a value")
            key_value_dict = {key: value}
        if key_value_dict is None:
            checks.fail(where, "nothing to override: give key and value, or key_value_dict")
        _check_keys(where, key_value_dict)
        self.uses_config_override = True
        for p in parameters:
            # A dict of its own per parameter (bitsandbytes shares one, so that a later override of one parameter
            # changed the others').
            self.pid2config.setdefault(id(p), {}).update(key_value_dict)

    def register_module_override(self, module: torch.nn.Module, param_name: str, config: dict) -> None:
        """Overrides `config` for module.<param_name>, found among the optimizer's parameters at its first step."""
        _check_keys("GlobalOptimManager.register_module_override", config)
        self.module_weight_config_triple.append((module, param_name, dict(config)))
