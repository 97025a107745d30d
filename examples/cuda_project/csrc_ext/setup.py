"""Ahead-of-time build of the fused bias+GELU extension.

    cd csrc_ext && pip install .          # or: python setup.py build_ext --inplace
"""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="fused_bias_gelu",
    version="0.1.0",
    ext_modules=[
        CUDAExtension(
            name="fused_bias_gelu_cuda",
            sources=["csrc/fused_bias_gelu.cpp", "csrc/fused_bias_gelu_kernel.cu"],
            extra_compile_args={
                "cxx": ["-O3"],
                "nvcc": ["-O3", "--use_fast_math", "-gencode=arch=compute_80,code=sm_80",
                         "-gencode=arch=compute_90,code=sm_90"],
            },
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
