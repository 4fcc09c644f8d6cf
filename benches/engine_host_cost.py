"""Host CPU time of the engine on a warm 1k add, 1M add, softmax, log_softmax's backward and layer_norm
4096x1024 (neuron vs CPU eager) and the 25-op 1M elementwise chain (eager vs adaptive), best of N in
time.thread_time.

Why thread CPU time: on a shared, loaded machine wall time swings by several x between runs (CPU eager in
benches/ratios.py especially); a thread's CPU time counts only this thread's work, page faults included.
Usage: PYTHONPATH=. python benches/engine_host_cost.py   (run the base tree and the change back to back)
"""
import os
import resource
import sys
import time
import warnings
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch, device_impl  # noqa
warnings.filterwarnings("ignore")


def main() -> None:
    """The script: asv's and pytest's discovery import this module and must not run it."""
    torch.set_num_threads(1)
    def best(fn, n: int, rep: int) -> float:
        """Seconds of thread CPU time per call: the best of ``rep`` rounds of ``n`` calls."""
        fn()
        b = 1e9
        for _ in range(rep):
            t = time.thread_time()
            for _ in range(n): fn()
            b = min(b, (time.thread_time() - t) / n)
        return b
    res = {}
    for dev in ("cpu", "neuron"):
        a = torch.rand(1024, device=dev); b = torch.rand(1024, device=dev)
        A = torch.rand(1 << 20, device=dev); B = torch.rand(1 << 20, device=dev)
        X = torch.randn(4096, 1024, device=dev)
        G, Y = torch.randn(4096, 1024, device=dev), torch.log_softmax(X, -1)
        res[dev] = (best(lambda: torch.add(a, b), 2000, 7), best(lambda: torch.add(A, B), 20, 7),
                    best(lambda: torch.softmax(X, -1), 3, 5),
                    best(lambda: torch.ops.aten._log_softmax_backward_data(G, Y, -1, torch.float32), 3, 5),
                    best(lambda: torch.nn.functional.layer_norm(X, (1024,)), 3, 5))
    for i, name in enumerate(("add_1k", "add_1m", "softmax_4096x1024", "log_softmax_bwd_4096x1024",
                              "layer_norm_4096x1024")):
        c, n = res["cpu"][i], res["neuron"][i]
        print(f"{name:26s} cpu {c*1e6:10.2f}us neuron {n*1e6:10.2f}us ratio {n/c:6.1f}x")
    x = torch.rand(1 << 20, device="neuron")
    def chain() -> torch.Tensor:
        """The elementwise_chain_1m case of benches/cases.py, synchronized (adaptive runs its queue)."""
        y = x
        for i in range(10):
            y = torch.sigmoid(y * 1.01 + 0.1) if i % 2 else torch.tanh(y - 0.05)
        torch.neuron.synchronize()
        return y
    res = {}
    for mode in ("eager", "adaptive"):
        with torch.neuron.eager_mode(mode):
            chain(); chain()
            r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            b = 1e9
            for _ in range(7):
                t = time.thread_time(); chain(); b = min(b, time.thread_time() - t)
            res[mode] = b
            print(f"{mode:9s} {b*1e3:8.2f} ms CPU  page faults/call {(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0)/7:.0f}")
    print(f"adaptive speedup over eager {res['eager']/res['adaptive']:.2f}x")


if __name__ == "__main__":
    main()
