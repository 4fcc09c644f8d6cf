"""asv: models (MLP, Llama-style decoder block, tiny LlamaForCausalLM forward and static-cache decode
step, an SGD training step) in every mode and dtype: wall time, peak host memory, the device's
counters, recompiles (compiled mode), padded-token fraction (where the inputs are padded).
"""

from benches import common
from benches.cases import CASES

MODELS = [name for name, case in CASES.items() if "asv" in case.tags and "models" in case.tags]
PADDED = ["llama_forward", "llama_decode_static"]  # the cases whose inputs carry padding


def _measure_models(self=None) -> dict:
    """setup_cache shared by the track suites below (asv keys it by this definition)."""
    return common.measure_suite(MODELS)


_measure_models.timeout = 900


class ModelsTime(common.TimeSuite):
    params = (MODELS, common.MODES, common.DTYPE_NAMES)


class ModelsPeakMem(common.PeakMemSuite):
    params = (MODELS, common.MODES, common.DTYPE_NAMES)


class ModelsDevice(common.TrackSuite):
    params = (MODELS, common.NEURON_MODES, common.DTYPE_NAMES)
    setup_cache = _measure_models
    track_device_seconds = common.track("device_seconds", "seconds", "simulated NeuronCore time of one call")
    track_launches = common.track("launches", "launches", "kernel launches (programs) in one call")
    track_tensore_utilization = common.track("tensore_utilization", "fraction",
                                             "TensorE busy time / device time during one call")
    track_hbm_bytes = common.track("hbm_bytes", "bytes", "HBM bytes read and written by one call")
    track_fallback_ops = common.track("fallback_ops", "calls", "aten calls served by the CPU fallback")
    track_device_peak_bytes = common.track("device_peak_bytes", "bytes",
                                           "torch.neuron.max_memory_allocated() over one call")


class ModelsRecompiles(common.TrackSuite):
    params = (MODELS, ("compiled",), common.DTYPE_NAMES)
    setup_cache = _measure_models
    requires = "recompiles"
    track_recompiles = common.track("recompiles", "graphs",
                                    "graphs compiled by 3 further calls after the first (0 when shapes are static)")


class ModelsPadding(common.TrackSuite):
    params = (PADDED, common.NEURON_MODES, common.DTYPE_NAMES)
    setup_cache = _measure_models
    requires = "padded_fraction"
    track_padded_fraction = common.track("padded_fraction", "fraction",
                                         "share of token slots that are padding (mask zeros, empty cache slots)")
