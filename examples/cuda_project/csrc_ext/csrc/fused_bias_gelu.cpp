// Host side of the fused bias + GELU extension: input checks, dispatch to the CUDA kernels, bindings.
#include <torch/extension.h>
#include <torch/library.h>

torch::Tensor fused_bias_gelu_forward_cuda(const torch::Tensor& x, const torch::Tensor& bias);
torch::Tensor fused_bias_gelu_backward_cuda(const torch::Tensor& grad, const torch::Tensor& x,
                                            const torch::Tensor& bias);

#define CHECK_CUDA(x) TORCH_CHECK((x).is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK((x).is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT(x) \
  CHECK_CUDA(x);       \
  CHECK_CONTIGUOUS(x)

torch::Tensor bias_gelu_forward(const torch::Tensor& x, const torch::Tensor& bias) {
  CHECK_INPUT(x);
  CHECK_INPUT(bias);
  TORCH_CHECK(x.size(-1) == bias.size(0), "last dimension of x must match bias");
  return fused_bias_gelu_forward_cuda(x, bias);
}

torch::Tensor bias_gelu_backward(const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& bias) {
  CHECK_INPUT(grad);
  CHECK_INPUT(x);
  CHECK_INPUT(bias);
  return fused_bias_gelu_backward_cuda(grad, x, bias);
}

// torch.ops.myops.bias_gelu / torch.ops.myops.bias_gelu_backward (usable from torch.compile graphs)
TORCH_LIBRARY(myops, m) {
  m.def("bias_gelu(Tensor x, Tensor bias) -> Tensor");
  m.def("bias_gelu_backward(Tensor grad, Tensor x, Tensor bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(myops, CUDA, m) {
  m.impl("bias_gelu", &bias_gelu_forward);
  m.impl("bias_gelu_backward", &bias_gelu_backward);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &bias_gelu_forward, "fused bias + GELU forward (CUDA)");
  m.def("backward", &bias_gelu_backward, "fused bias + GELU backward (CUDA)");
}
