// CUDA kernels: y = gelu(x + bias) (tanh approximation) and its gradient, one thread per element.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <torch/extension.h>

namespace {

constexpr float kAlpha = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kBeta = 0.044715f;

template <typename scalar_t>
__global__ void bias_gelu_fwd_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ bias,
                                     scalar_t* __restrict__ y, int64_t n, int64_t hidden) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = static_cast<float>(x[i]) + static_cast<float>(bias[i % hidden]);
  const float t = tanhf(kAlpha * (v + kBeta * v * v * v));
  y[i] = static_cast<scalar_t>(0.5f * v * (1.0f + t));
}

template <typename scalar_t>
__global__ void bias_gelu_bwd_kernel(const scalar_t* __restrict__ g, const scalar_t* __restrict__ x,
                                     const scalar_t* __restrict__ bias, scalar_t* __restrict__ dx, int64_t n,
                                     int64_t hidden) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float v = static_cast<float>(x[i]) + static_cast<float>(bias[i % hidden]);
  const float t = tanhf(kAlpha * (v + kBeta * v * v * v));
  const float dt = (1.0f - t * t) * kAlpha * (1.0f + 3.0f * kBeta * v * v);
  dx[i] = static_cast<scalar_t>(static_cast<float>(g[i]) * 0.5f * ((1.0f + t) + v * dt));
}

}  // namespace

torch::Tensor fused_bias_gelu_forward_cuda(const torch::Tensor& x, const torch::Tensor& bias) {
  const at::cuda::OptionalCUDAGuard guard(device_of(x));
  auto y = torch::empty_like(x);
  const int64_t n = x.numel();
  const int threads = 256;
  const int blocks = static_cast<int>((n + threads - 1) / threads);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bias_gelu_fwd", [&] {
    bias_gelu_fwd_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
        x.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n, bias.numel());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

torch::Tensor fused_bias_gelu_backward_cuda(const torch::Tensor& grad, const torch::Tensor& x,
                                            const torch::Tensor& bias) {
  const at::cuda::OptionalCUDAGuard guard(device_of(x));
  auto dx = torch::empty_like(x);
  const int64_t n = x.numel();
  const int threads = 256;
  const int blocks = static_cast<int>((n + threads - 1) / threads);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bias_gelu_bwd", [&] {
    bias_gelu_bwd_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
        grad.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(), bias.data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(), n,
        bias.numel());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return dx;
}
