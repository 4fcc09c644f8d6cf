"""Environment configuration: core counts, visible cores, HBM capacity."""

import pytest

from device_impl.runtime import config


def test_defaults_are_one_trn1_chip():
    cfg = config.read({})
    assert cfg.device_count == 2
    assert cfg.visible_cores == (0, 1)
    assert cfg.hbm_bytes == 16 * 2**30


@pytest.mark.parametrize("text, expected", [("1", (1,)), ("0-1", (0, 1)), ("0,1", (0, 1)), ("1-3", (1, 2, 3))])
def test_visible_cores_syntax(text, expected):
    assert config.read({"NEURON_RT_NUM_CORES": "4", "NEURON_RT_VISIBLE_CORES": text}).visible_cores == expected


@pytest.mark.parametrize("text, message", [
    ("2", "simulated instance has 2"), ("x", "not a core index"), ("1-0", "reversed"), ("0,0", "twice")])
def test_bad_visible_cores_name_the_variable(text, message):
    with pytest.raises(ValueError, match="NEURON_RT_VISIBLE_CORES") as info:
        config.read({"NEURON_RT_VISIBLE_CORES": text})
    assert message in str(info.value)


@pytest.mark.parametrize("text, expected", [("1024", 1024), ("16GiB", 16 * 2**30), ("512 MiB", 512 * 2**20),
                                             ("1.5g", int(1.5 * 2**30))])
def test_hbm_sizes(text, expected):
    assert config.parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-5", "0", "12 parsecs"])
def test_bad_hbm_sizes(text):
    with pytest.raises(ValueError, match="NEURON_HBM_BYTES"):
        config.parse_bytes(text)


def test_num_cores_must_be_a_small_positive_integer():
    with pytest.raises(ValueError, match="NEURON_RT_NUM_CORES"):
        config.read({"NEURON_RT_NUM_CORES": "0"})
    assert config.read({"NEURON_RT_NUM_CORES": "8"}).device_count == 8
