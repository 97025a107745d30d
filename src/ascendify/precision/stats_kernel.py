"""One pass over a CPU tensor's memory for min, max, sum, sum of squares and NaN/Inf counts (a small C kernel).

``stats.stat_vector`` needs four numbers per tensor; torch gives them in three passes over the data (``aminmax``,
``sum``, ``linalg.vector_norm``). A dump summarises every activation of a model, and on the CPU a tensor of a few
MiB that a layer has just written is read back from memory three times: in a transformer forward that was most of
the dump's cost. The kernel below reads each element once (8 float32 lanes per block, folded into double every 4,096
elements), and also counts NaN and Inf, which the torch path only counts when the norm is not finite.

It is compiled on first use with the system's C compiler (``$CC``, else ``cc``/``gcc``, ``-O3 -march=native``) into
``$ASCENDIFY_CACHE`` (default ``~/.cache/ascendify``), keyed by the source and the CPU's flags, and loaded with
``ctypes``. Where there is no compiler, the build fails, or ``ASCENDIFY_STATS_KERNEL=0``, :func:`kernel` returns None
and ``stat_vector`` uses the torch path: the results agree within float32 rounding of the sums (the kernel's are
closer to exact: double across blocks).

Covered: float32, bfloat16 and float16 tensors in host memory, of any strides (up to 16 dimensions). One call
(``vec_*``) gives a tensor's whole statistics vector, the fingerprint included (``stats.StatTable``); the fingerprint
sums 64 samples at a time in float32 vectors, then in double, gathering a strided view's samples at offsets computed
once per layout (``offsets``).

Where Python's headers are installed the same library is also built as the Python module ``ascendify_stats_kernel``
(:func:`ext`): its ``fill`` calls a kernel for about 0.2 us where ctypes' conversion of the ten arguments cost
several (a dump's fixed cost per tensor: ``benchmarks/dump_overhead.py``'s short configuration).
``ASCENDIFY_STATS_KERNEL_EXT=0``, or no headers, leaves ctypes alone: the same numbers
(``tests/precision/test_stats_kernel.py``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ascendify.core.fileio import cache_dir

_SOURCE = r"""
#ifdef WITH_PYTHON
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#endif
#include <stdint.h>
#include <string.h>
#include <math.h>

#define LANES 32
#define BLOCK 4096
#define MAXDIM 16

static inline float bf16_to_f32(uint16_t h) { uint32_t u = ((uint32_t)h) << 16; float f; memcpy(&f, &u, 4); return f; }

typedef struct { float mn[LANES], mx[LANES], s[LANES], q[LANES]; double sum, sq; int64_t cnt; } acc_t;

static void acc_init(acc_t* a) {
    for (int l = 0; l < LANES; l++) { a->mn[l] = INFINITY; a->mx[l] = -INFINITY; a->s[l] = 0.f; a->q[l] = 0.f; }
    a->sum = 0.0; a->sq = 0.0; a->cnt = 0;
}

static void acc_fold(acc_t* a) {  /* lane partial sums into double: every BLOCK elements, so float sums stay short */
    float bs = 0.f, bq = 0.f;
    for (int l = 0; l < LANES; l++) { bs += a->s[l]; bq += a->q[l]; a->s[l] = 0.f; a->q[l] = 0.f; }
    a->sum += bs; a->sq += bq; a->cnt = 0;
}

/* one contiguous run of n elements */
#define RUN(NAME, T, LOAD)                                                                                       \
static __attribute__((noinline)) void NAME(acc_t* a, const T* x, int64_t n) {                                    \
    int64_t i = 0;                                                                                               \
    while (i < n) {                                                                                              \
        int64_t take = BLOCK - a->cnt; if (take > n - i) take = n - i;                                           \
        int64_t end = i + take;                                                                                  \
        float s[LANES], q[LANES], mn[LANES], mx[LANES];                                                          \
        for (int l = 0; l < LANES; l++) { s[l] = a->s[l]; q[l] = a->q[l]; mn[l] = a->mn[l]; mx[l] = a->mx[l]; }  \
        for (; i + LANES <= end; i += LANES) {                                                                   \
            for (int l = 0; l < LANES; l++) {                                                                    \
                float v = LOAD(x[i + l]);                                                                        \
                s[l] += v; q[l] += v * v;                                                                        \
                mn[l] = v < mn[l] ? v : mn[l]; mx[l] = v > mx[l] ? v : mx[l];                                    \
            }                                                                                                    \
        }                                                                                                        \
        for (; i < end; i++) {                                                                                   \
            float v = LOAD(x[i]);                                                                                \
            s[0] += v; q[0] += v * v;                                                                            \
            mn[0] = v < mn[0] ? v : mn[0]; mx[0] = v > mx[0] ? v : mx[0];                                        \
        }                                                                                                        \
        for (int l = 0; l < LANES; l++) { a->s[l] = s[l]; a->q[l] = q[l]; a->mn[l] = mn[l]; a->mx[l] = mx[l]; }  \
        a->cnt += take;                                                                                          \
        if (a->cnt >= BLOCK) acc_fold(a);                                                                        \
    }                                                                                                            \
}

/* the same run over n elements `st` apart (a column, a broadcast dimension): scalar, no vectorisation */
#define RUNS(NAME, T, LOAD)                                                                                      \
static void NAME(acc_t* a, const T* x, int64_t n, int64_t st) {                                                  \
    for (int64_t i = 0; i < n; i++) {                                                                            \
        float v = LOAD(x[i * st]); int l = (int)(i & (LANES - 1));                                               \
        a->s[l] += v; a->q[l] += v * v;                                                                          \
        a->mn[l] = v < a->mn[l] ? v : a->mn[l]; a->mx[l] = v > a->mx[l] ? v : a->mx[l];                          \
        if (++a->cnt >= BLOCK) acc_fold(a);                                                                      \
    }                                                                                                            \
}

/* the memory offset of the fingerprint's i-th sample (logical position pos[i], or i when pos is NULL) in a strided
   tensor, where no offsets were computed (`offsets`) */
static inline int64_t fp_offset(int64_t i, const int64_t* pos, int nd, const int64_t* sizes, const int64_t* strides) {
    int64_t l = pos ? pos[i] : i, off = 0;
    for (int d = nd - 1; d >= 0; d--) { off += (l % sizes[d]) * strides[d]; l /= sizes[d]; }
    return off;
}

typedef float v8f __attribute__((vector_size(32)));               /* 8 fingerprint components (GCC/clang) */
typedef float v8u __attribute__((vector_size(32), aligned(4)));   /* the same, read from any float address */

/* The whole statistics vector of a strided tensor of any layout, in one call (stats.StatTable):
   out[0..5] = [min, max, sum, norm, nan_count, inf_count], copied from `head` when it is not NULL (a view of
   elements already summarised), out[6..13] = the fingerprint (precision.model) over logical positions.
   dims: sizes[0..nd-1] then, from dims + MAXDIM, strides (elements), in logical order; pos: NULL = every position
   (k == numel); offs: the positions' memory offsets (`offsets`), or NULL to compute them here. The head walks
   memory order (dimensions sorted by stride, contiguous neighbours merged), so a transposed or sliced view reads
   memory in sequence. */
#define VEC(NAME, RUNNAME, T, LOAD)                                                                              \
RUNS(RUNNAME##_s, T, LOAD)                                                                                       \
void NAME(const T* x, int nd, const int64_t* dims, const int64_t* pos, int64_t k, const float* w, float scale,  \
          const float* head, float* out, const int64_t* offs) {                                                   \
    const int64_t* sizes = dims; const int64_t* strides = dims + MAXDIM;                                         \
    if (head) { for (int j = 0; j < 6; j++) out[j] = head[j]; }                                                  \
    else {                                                                                                       \
        int order[MAXDIM]; int m = 0;                                                                            \
        for (int d = 0; d < nd; d++) {                 /* insertion sort by stride, descending; stride 0 first */\
            if (sizes[d] == 1) continue;                                                                         \
            int64_t sd = strides[d] == 0 ? INT64_MAX : (strides[d] < 0 ? -strides[d] : strides[d]);              \
            int j = m++;                                                                                         \
            while (j > 0) {                                                                                      \
                int64_t so = strides[order[j - 1]];                                                              \
                so = so == 0 ? INT64_MAX : (so < 0 ? -so : so);                                                  \
                if (so >= sd) break;                                                                             \
                order[j] = order[j - 1]; j--;                                                                    \
            }                                                                                                    \
            order[j] = d;                                                                                        \
        }                                                                                                        \
        int64_t ms[MAXDIM], mt[MAXDIM]; int r = 0;                                                               \
        for (int i = 0; i < m; i++) {                                                                            \
            int64_t sz = sizes[order[i]], st = strides[order[i]];                                                \
            if (r > 0 && mt[r - 1] == st * sz) { ms[r - 1] *= sz; mt[r - 1] = st; }                              \
            else { ms[r] = sz; mt[r] = st; r++; }                                                                \
        }                                                                                                        \
        if (r == 0) { ms[0] = 1; mt[0] = 1; r = 1; }                                                             \
        acc_t a; acc_init(&a);                                                                                   \
        int64_t idx[MAXDIM]; int64_t inner = ms[r - 1], ist = mt[r - 1];                                         \
        int64_t rows = 1; for (int d = 0; d < r - 1; d++) rows *= ms[d];                                         \
        int64_t nans = 0, infs = 0;                                                                              \
        for (int pass = 0; pass < 2; pass++) {                                                                   \
            const T* p = x;                                                                                      \
            for (int d = 0; d < r; d++) idx[d] = 0;                                                              \
            for (int64_t row = 0; row < rows; row++) {                                                           \
                if (pass == 0) { if (ist == 1) RUNNAME(&a, p, inner); else RUNNAME##_s(&a, p, inner, ist); }     \
                else for (int64_t j = 0; j < inner; j++) {                                                       \
                    float v = LOAD(p[j * ist]); if (v != v) nans++; else if (isinf(v)) infs++;                   \
                }                                                                                                \
                for (int d = r - 2; d >= 0; d--) {                                                               \
                    p += mt[d];                                                                                  \
                    if (++idx[d] < ms[d]) break;                                                                 \
                    p -= mt[d] * ms[d]; idx[d] = 0;                                                              \
                }                                                                                                \
            }                                                                                                    \
            if (pass == 0) { acc_fold(&a); if (isfinite(a.sq)) break; }                                          \
        }                                                                                                        \
        float mn = INFINITY, mx = -INFINITY;                                                                     \
        for (int l = 0; l < LANES; l++) { mn = a.mn[l] < mn ? a.mn[l] : mn; mx = a.mx[l] > mx ? a.mx[l] : mx; }  \
        if (nans) { mn = NAN; mx = NAN; }                                                                        \
        out[0] = mn; out[1] = mx; out[2] = (float)a.sum; out[3] = (float)sqrt(a.sq);                             \
        out[4] = (float)nans; out[5] = (float)infs;                                                              \
    }                                                                                                            \
    int contiguous = 1; int64_t expect = 1;                                                                      \
    for (int d = nd - 1; d >= 0; d--) {                                                                          \
        if (sizes[d] != 1 && strides[d] != expect) { contiguous = 0; break; }                                    \
        expect *= sizes[d];                                                                                      \
    }                                                                                                            \
    /* the 64 samples of a block gathered, then summed in float (four sums of every fourth sample, 8 components */\
    /* a vector: one sum would wait on the previous FMA at every sample), then added in double */               \
    double acc[8] = {0., 0., 0., 0., 0., 0., 0., 0.};                                                            \
    float g[64];                                                                                                 \
    for (int64_t b = 0; b < k; b += 64) {                                                                        \
        int m = (int)(b + 64 < k ? 64 : k - b);                                                                  \
        if (offs) { for (int t = 0; t < m; t++) g[t] = LOAD(x[offs[b + t]]); }                                   \
        else if (contiguous && !pos) { for (int t = 0; t < m; t++) g[t] = LOAD(x[b + t]); }                      \
        else if (contiguous) { for (int t = 0; t < m; t++) g[t] = LOAD(x[pos[b + t]]); }                         \
        else { for (int t = 0; t < m; t++) g[t] = LOAD(x[fp_offset(b + t, pos, nd, sizes, strides)]); }         \
        const v8u* W = (const v8u*)(w + 8 * b);                                                                  \
        v8f p0 = {0}, p1 = {0}, p2 = {0}, p3 = {0};                                                              \
        int t = 0;                                                                                               \
        for (; t + 4 <= m; t += 4) {                                                                             \
            p0 += W[t] * g[t]; p1 += W[t + 1] * g[t + 1]; p2 += W[t + 2] * g[t + 2]; p3 += W[t + 3] * g[t + 3]; \
        }                                                                                                        \
        for (; t < m; t++) p0 += W[t] * g[t];                                                                    \
        v8f part = (p0 + p1) + (p2 + p3);                                                                        \
        for (int j = 0; j < 8; j++) acc[j] += part[j];                                                           \
    }                                                                                                            \
    for (int j = 0; j < 8; j++) out[6 + j] = (float)(acc[j] * scale);                                            \
}

/* The memory offsets (elements) of the fingerprint's k logical positions `pos` (NULL: 0..k-1) in a tensor of
   sizes/strides `dims` (as for vec_*): computed once per layout (stats._offsets) and passed to vec_* as `offs`, so
   a strided view's fingerprint gathers without a division per sample and dimension. */
void offsets(int nd, const int64_t* dims, const int64_t* pos, int64_t k, int64_t* out) {
    const int64_t* sizes = dims; const int64_t* strides = dims + MAXDIM;
    for (int64_t i = 0; i < k; i++) {
        int64_t l = pos ? pos[i] : i, off = 0;
        for (int d = nd - 1; d >= 0; d--) { off += (l % sizes[d]) * strides[d]; l /= sizes[d]; }
        out[i] = off;
    }
}

#define ID(v) (v)
#define BF(v) bf16_to_f32(v)
#define HF(v) ((float)(v))
RUN(run_f32, float, ID)
VEC(vec_f32, run_f32, float, ID)
RUN(run_bf16, uint16_t, BF)
VEC(vec_bf16, run_bf16, uint16_t, BF)
#ifdef WITH_F16
RUN(run_f16, _Float16, HF)
VEC(vec_f16, run_f16, _Float16, HF)
#endif

#ifdef WITH_PYTHON
/* The same kernels as the Python module ``ascendify_stats_kernel`` (``ext()``): a call costs about 0.2 us where ctypes'
   conversion of ten arguments and the dims array cost several. */
typedef void (*vec_fn)(const void*, int, const int64_t*, const int64_t*, int64_t, const float*, float, const float*,
                       float*, const int64_t*);
static vec_fn kinds[3];

static void* as_ptr(PyObject* o) { return o == Py_None ? NULL : PyLong_AsVoidPtr(o); }

/* fill(kind, data_ptr, shape, strides, positions, k, weights, scale, head, out, offsets): vec_* of dtype kind
   (0 float32, 1 bfloat16, 2 float16) on a tensor of these sizes and strides (tuples); pointers as ints or None. */
static PyObject* fr_fill(PyObject* self, PyObject* const* a, Py_ssize_t n) {
    if (n != 11) { PyErr_SetString(PyExc_TypeError, "fill takes 11 arguments"); return NULL; }
    long kind = PyLong_AsLong(a[0]);
    if (kind < 0 || kind > 2 || !kinds[kind]) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "no kernel for this dtype");
        return NULL;
    }
    if (!PyTuple_Check(a[2]) || !PyTuple_Check(a[3]) || PyTuple_GET_SIZE(a[2]) != PyTuple_GET_SIZE(a[3])
        || PyTuple_GET_SIZE(a[2]) > MAXDIM) {
        PyErr_SetString(PyExc_ValueError, "shape and strides: tuples of the same length, at most 16");
        return NULL;
    }
    int nd = (int)PyTuple_GET_SIZE(a[2]);
    int64_t dims[2 * MAXDIM];
    for (int d = 0; d < nd; d++) {
        dims[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(a[2], d));
        dims[MAXDIM + d] = PyLong_AsLongLong(PyTuple_GET_ITEM(a[3], d));
    }
    const void* x = as_ptr(a[1]);
    const int64_t* pos = (const int64_t*)as_ptr(a[4]);
    int64_t k = PyLong_AsLongLong(a[5]);
    const float* w = (const float*)as_ptr(a[6]);
    double scale = PyFloat_AsDouble(a[7]);
    const float* head = (const float*)as_ptr(a[8]);
    float* out = (float*)as_ptr(a[9]);
    const int64_t* offs = (const int64_t*)as_ptr(a[10]);
    if (PyErr_Occurred()) return NULL;
    if (!x || !out || !w) { PyErr_SetString(PyExc_ValueError, "a null pointer"); return NULL; }
    Py_BEGIN_ALLOW_THREADS
    kinds[kind](x, nd, dims, pos, k, w, (float)scale, head, out, offs);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef fr_methods[] = {
    {"fill", (PyCFunction)(void (*)(void))fr_fill, METH_FASTCALL, "vec_* on a strided tensor"},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef fr_module = {PyModuleDef_HEAD_INIT, "ascendify_stats_kernel", NULL, -1, fr_methods};

PyMODINIT_FUNC PyInit_ascendify_stats_kernel(void) {
    kinds[0] = (vec_fn)vec_f32;
    kinds[1] = (vec_fn)vec_bf16;
#ifdef WITH_F16
    kinds[2] = (vec_fn)vec_f16;
#endif
    return PyModule_Create(&fr_module);
}
#endif
"""

_lib = None
_ext = None
_tried = False
EXT_NAME = "ascendify_stats_kernel"


def _cpu_key() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    import platform

    return platform.machine() + platform.processor()


def _build(cc: str, flags: list[str], dest: Path) -> bool:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        src = Path(tmp) / "stats_kernel.c"
        src.write_text(_SOURCE)
        so = Path(tmp) / dest.name
        cmd = [cc, "-O3", "-fPIC", "-shared", "-fno-math-errno", *flags, str(src), "-o", str(so), "-lm"]
        try:
            r = subprocess.run(cmd, capture_output=True, timeout=120)
        except (OSError, subprocess.SubprocessError):
            return False
        if r.returncode != 0 or not so.exists():
            return False
        os.replace(so, dest)  # atomic: a concurrent process sees the old file or the whole new one
    return True


def _python_flags() -> list[str]:
    """Flags that build the library as the Python module ``ascendify_stats_kernel`` too, or [] without Python's
    headers (then only ctypes serves)."""
    if os.environ.get("ASCENDIFY_STATS_KERNEL_EXT", "1") == "0":
        return []
    try:
        import sysconfig

        inc = sysconfig.get_paths()["include"]
    except Exception:
        return []
    return ["-DWITH_PYTHON", f"-I{inc}"] if inc and os.path.exists(os.path.join(inc, "Python.h")) else []


def ext():
    """The kernels as a Python module (``fill``: see the C source), or None (no Python headers, or the library could
    not be built): ``kernel()``'s ctypes functions serve."""
    kernel()
    return _ext


def kernel():
    """The loaded library (``stats_f32``, ``stats_bf16``, maybe ``stats_f16``), or None where it cannot be had."""
    global _lib, _ext, _tried
    if _tried:
        return _lib
    _tried = True
    if os.environ.get("ASCENDIFY_STATS_KERNEL", "1") == "0" or sys.platform == "win32":
        return None
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    arch = ["-march=native", "-mprefer-vector-width=512"]
    py = _python_flags()
    pytag = f"{sys.implementation.cache_tag}" if py else ""
    tag = hashlib.sha256((_SOURCE + _cpu_key() + cc + pytag + " ".join(py)).encode()).hexdigest()[:16]
    variants = [(py + ["-DWITH_F16"], "_py_f16"), (py, "_py")] if py else []
    variants += [(["-DWITH_F16"], "_f16"), ([], "")]
    for extra, suffix in variants:
        dest = cache_dir("stats_kernel") / f"stats_kernel_{tag}{suffix}.so"
        try:
            if not dest.exists() and not _build(cc, arch + extra, dest):
                continue
            lib = ctypes.CDLL(str(dest))
            if "-DWITH_PYTHON" in extra:
                _ext = _import(dest)
        except Exception:  # a read-only cache, a broken compiler: the torch path serves
            continue
        for name in ("vec_f32", "vec_bf16", "vec_f16"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                               ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
                fn.restype = None
        lib.offsets.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
        lib.offsets.restype = None
        _lib = lib
        return _lib
    return None


def _import(path: Path):
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(EXT_NAME, str(path))
    spec = importlib.util.spec_from_file_location(EXT_NAME, str(path), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod
