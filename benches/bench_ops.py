"""asv: single ops (matmul, elementwise chain, softmax, layer_norm, attention) in every mode and dtype.

Cases are the ``asv``-tagged ``ops`` cases of benches/cases.py; the suites are benches/common.py's.
"""

from benches import common
from benches.cases import CASES

OPS = [name for name, case in CASES.items() if "asv" in case.tags and "ops" in case.tags]


def _measure_ops(self=None) -> dict:
    """setup_cache of the track suites below: every neuron mode and dtype of OPS, one call each."""
    return common.measure_suite(OPS)


_measure_ops.timeout = 600


class OpsTime(common.TimeSuite):
    params = (OPS, common.MODES, common.DTYPE_NAMES)


class OpsDevice(common.TrackSuite):
    params = (OPS, common.NEURON_MODES, common.DTYPE_NAMES)
    setup_cache = _measure_ops
    track_device_seconds = common.track("device_seconds", "seconds", "simulated NeuronCore time of one call")
    track_tensore_utilization = common.track("tensore_utilization", "fraction",
                                             "TensorE busy time / device time during one call")
    track_hbm_bytes = common.track("hbm_bytes", "bytes", "HBM bytes read and written by one call")
    track_fallback_ops = common.track("fallback_ops", "calls", "aten calls served by the CPU fallback")


class OpsCompiledVsEager(common.TrackSuite):
    """Issue 21: compiled mode must never lose to the hand-written kernels (benches/compiled_vs_eager_ops.py).
    A ratio of simulated device times: deterministic, so in the exact half of the asv gate as TrackSuite's."""

    param_names = ["case", "dtype"]
    params = (OPS, common.DTYPE_NAMES)
    timeout = 60
    setup_cache = _measure_ops

    def setup(self, results: dict, case: str, dtype: str) -> None:
        common.lookup(results, (case, "compiled", dtype), "device_seconds")  # skips what cannot run

    def track_compiled_over_eager(self, results: dict, case: str, dtype: str) -> float:
        """Compiled device time / the better of eager and adaptive eager's (above 1: the compiler loses)."""
        compiled = common.lookup(results, (case, "compiled", dtype), "device_seconds")
        return compiled / min(common.lookup(results, (case, mode, dtype), "device_seconds")
                              for mode in ("eager", "adaptive"))

    track_compiled_over_eager.unit = "ratio"
