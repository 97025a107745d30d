"""The .cu/.cpp scan for ops exposed to Python."""

from ascendify.migrate.native import scan_native

SRC = """
// PYBIND11_MODULE(commented_out, m) { m.def("ghost", &g); }
#include <torch/extension.h>
__global__ void __launch_bounds__(256) add_kernel(float* x) {}
TORCH_LIBRARY(myops, m) {
  m.def("fused(Tensor x) -> Tensor");
}
TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("fused", &fused_cuda);
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "fwd");
  m.def("backward", &backward);
}
"""


def test_scan_lists_every_exposed_op_and_kernel():
    rows = scan_native(SRC)
    got = [(r["kind"], r["namespace"], r["op"], r["dispatch_key"]) for r in rows]
    assert ("torch_library", "myops", "fused", "") in got
    assert ("torch_library_impl", "myops", "fused", "CUDA") in got
    assert ("pybind11", "TORCH_EXTENSION_NAME", "forward", "") in got
    assert ("pybind11", "TORCH_EXTENSION_NAME", "backward", "") in got
    assert ("cuda_kernel", "", "add_kernel", "CUDA") in got
    assert not any(r["op"] == "ghost" for r in rows)
    assert [r["line"] for r in rows if r["op"] == "forward"] == [12]
