"""iclr26: one pipeline that regenerates the headline tables of 19 ICLR 2026 papers."""
import os as _os

__version__ = "0.1.0"

# Same seed, same numbers on every x86 machine: BLAS and torch pick their kernels by CPU, and an
# AVX-512 machine rounds float32 matmuls differently from an AVX2 one (tiny verdicts moved between
# machines). Every process of the pipeline imports this package before numpy or torch, so the
# AVX2 code path of each library is pinned here, before they load: MKL (torch's BLAS on x86),
# OpenBLAS (numpy's, scipy's), oneDNN and torch's own vectorised kernels; MKL_CBWR asks MKL for its
# conditional numerical reproducibility mode on that path, so an Intel and an AMD AVX2 machine run the
# same code (MKL otherwise picks by vendor as well as by instruction set). The pins override the
# environment: a value set there would silently change the numbers. ICLR26_NATIVE_KERNELS=1 keeps the
# environment's values and each library's own choice instead (faster on some machines, and its
# numbers are then that machine's). Provenance records every value.
PINNED_KERNELS = {
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "MKL_CBWR": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
}
NATIVE_KERNELS = _os.environ.get("ICLR26_NATIVE_KERNELS") == "1"
for _name, _value in PINNED_KERNELS.items():
    if NATIVE_KERNELS:
        _os.environ.setdefault(_name, _value)
    else:
        _os.environ[_name] = _value
