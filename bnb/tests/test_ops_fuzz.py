"""A fixed set of the ops' differential fuzz cases (tools/fuzz/ops_fuzz.py): random shapes, layouts, dtypes,
codebooks, instruction sets and thread splits, each op on every device present against its pure-torch reference.
Longer runs: tools/fuzz."""

import pytest

import ops_fuzz


@pytest.mark.parametrize("first_seed", range(1, 801, 100))
def test_fixed_seeds_equal_reference(first_seed):
    for seed in range(first_seed, first_seed + 100):
        assert ops_fuzz.run_case(seed) is None
