"""asv: compile seconds of the models in compiled mode, cold (empty NEFF cache) and warm (cache hit).

Skipped (setup raises NotImplementedError) until torch.compile(backend="neuron") exists.
"""

from benches import common
from benches.bench_models import MODELS
from benches.measure import compile_seconds
from benches.modes import REGISTRY, ModeUnavailable


class CompileSeconds:
    params = (MODELS, common.DTYPE_NAMES)
    param_names = ["case", "dtype"]
    timeout = 600

    def setup(self, case: str, dtype: str) -> None:
        reason = REGISTRY["compiled"].unavailable()
        if reason:
            raise ModeUnavailable(reason)

    def track_cold_compile_seconds(self, case: str, dtype: str) -> float:
        return compile_seconds(case, dtype, warm=False)

    track_cold_compile_seconds.unit = "seconds"

    def track_warm_compile_seconds(self, case: str, dtype: str) -> float:
        return compile_seconds(case, dtype, warm=True)

    track_warm_compile_seconds.unit = "seconds"
