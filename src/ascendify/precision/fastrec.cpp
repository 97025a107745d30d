// The dump's per-tensor path in C++ (precision/fastrec.py): what the recorder reads of a tensor, and the statistics
// kernel's call for a contiguous tensor, in one call each, with no Python attribute access. The Python path
// (dumper._meta, dumper._memory_key, stats.StatTable._fast) is the reference: tests/precision/test_fastrec.py
// checks that both give the same answers.
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Device.h>
#include <ATen/core/grad_mode.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {
constexpr int MAXDIM = 16;
typedef void (*vec_fn)(const void*, int, const int64_t*, const int64_t*, int64_t, const float*, float, const float*,
                       float*, const int64_t*);
vec_fn kinds[3] = {nullptr, nullptr, nullptr};
typedef void (*offs_fn)(int, const int64_t*, const int64_t*, int64_t, int64_t*);
offs_fn offsets_fn = nullptr;  // stats_kernel's offsets: a strided layout's sample offsets (stats._offsets)
PyObject* plain_types[2] = {nullptr, nullptr};  // torch.Tensor, torch.nn.Parameter
PyObject* dtype_names[64] = {nullptr};
std::map<std::pair<int, int>, PyObject*> device_names;
PyObject* cpu_name = nullptr;

bool plain(PyObject* o) {
  PyObject* t = (PyObject*)Py_TYPE(o);
  return t == plain_types[0] || t == plain_types[1];
}

PyObject* dtype_name(c10::ScalarType st) {
  int i = (int)st;
  if (i < 0 || i >= 64) { PyErr_SetString(PyExc_ValueError, "fastrec: a dtype beyond the table"); return nullptr; }
  if (!dtype_names[i]) {
    PyObject* d = (PyObject*)torch::getTHPDtype(st);
    dtype_names[i] = PyObject_Str(d);
    if (!dtype_names[i]) return nullptr;
  }
  Py_INCREF(dtype_names[i]);
  return dtype_names[i];
}

PyObject* device_name(c10::Device d) {
  if (d.type() == c10::kCPU) { Py_INCREF(cpu_name); return cpu_name; }
  auto key = std::make_pair((int)d.type(), (int)d.index());
  auto it = device_names.find(key);
  if (it == device_names.end()) {
    PyObject* dev = THPDevice_New(d);
    if (!dev) return nullptr;
    PyObject* s = PyObject_Str(dev);
    Py_DECREF(dev);
    if (!s) return nullptr;
    it = device_names.emplace(key, s).first;
  }
  Py_INCREF(it->second);
  return it->second;
}

// _footprint's runs: (size, stride) in memory order, contiguous neighbours merged; one run of stride 1 is dense
std::vector<std::pair<int64_t, int64_t>> footprint_runs(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (size_t d = 0; d < sizes.size(); d++) if (sizes[d] != 1) dims.emplace_back(sizes[d], strides[d]);
  std::stable_sort(dims.begin(), dims.end(), [](const auto& a, const auto& b) {
    // the key (-stride if stride else -inf, -size), ascending
    bool a0 = a.second == 0, b0 = b.second == 0;
    if (a0 != b0) return a0;  // stride 0 first
    if (!a0 && a.second != b.second) return a.second > b.second;
    return a.first > b.first;
  });
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (auto& [sz, st] : dims) {
    if (!runs.empty() && runs.back().second == st * sz) { runs.back().first *= sz; runs.back().second = st; }
    else runs.emplace_back(sz, st);
  }
  return runs;
}

// What probe reads of a tensor, as C++ values: read first, so that no C++ exception is thrown once Python objects
// are made (a tensor whose data pointer may not be taken, a nested tensor without sizes: see probe)
struct Reads {
  c10::ScalarType dtype;
  std::vector<int64_t> sizes;
  c10::Device device = c10::Device(c10::kCPU);
  bool requires_grad, leaf, inference;
  int64_t version = 0;
  void* ptr = nullptr;  // null: no memory key
  bool dense = false;   // footprint = numel
  int64_t numel = 0;
  std::vector<std::pair<int64_t, int64_t>> runs;
};

// Fill r from t; may throw (the caller leaves the tensor to the Python path, having made nothing yet)
void read_tensor(const at::Tensor& t, Reads& r) {
  r.dtype = t.scalar_type();
  auto sizes = t.sizes();
  r.sizes.assign(sizes.begin(), sizes.end());
  r.device = t.device();
  r.requires_grad = t.requires_grad();
  r.leaf = r.requires_grad && t.is_leaf();
  r.inference = t.is_inference();
  if (r.inference) return;
  r.version = (int64_t)t._version();
  r.numel = t.numel();
  if (r.numel && t.layout() == c10::kStrided && t.has_storage()) {
    try {
      r.ptr = t.data_ptr();
    } catch (const std::exception&) {
      r.ptr = nullptr;  // as _memory_key: no key where the data pointer cannot be read
    }
    if (r.ptr) {
      if (t.is_contiguous()) r.dense = true;
      else {
        r.runs = footprint_runs(t.sizes(), t.strides());
        r.dense = r.runs.size() == 1 && r.runs[0].second == 1;
        if (r.dense) r.numel = r.runs[0].first;
      }
    }
  }
}

// dumper._meta: (dtype name, shape, requires_grad, device name)
PyObject* make_meta(const Reads& r) {
  PyObject* name = dtype_name(r.dtype);
  if (!name) return nullptr;
  PyObject* shape = THPSizeType.tp_alloc(&THPSizeType, (Py_ssize_t)r.sizes.size());
  if (shape) {
    for (size_t d = 0; d < r.sizes.size(); d++) {
      PyObject* v = PyLong_FromLongLong(r.sizes[d]);
      if (!v) { Py_CLEAR(shape); break; }
      PyTuple_SET_ITEM(shape, (Py_ssize_t)d, v);
    }
  }
  PyObject* dev = shape ? device_name(r.device) : nullptr;
  if (!shape || !dev) { Py_DECREF(name); Py_XDECREF(shape); Py_XDECREF(dev); return nullptr; }
  PyObject* meta = PyTuple_Pack(4, name, shape, r.requires_grad ? Py_True : Py_False, dev);
  Py_DECREF(name); Py_DECREF(shape); Py_DECREF(dev);
  return meta;
}

// dumper._memory_key: (data pointer, dtype, footprint), or None
PyObject* make_skey(const Reads& r) {
  if (!r.ptr) Py_RETURN_NONE;
  PyObject* fp;
  if (r.dense) fp = PyLong_FromLongLong(r.numel);
  else {
    fp = PyTuple_New((Py_ssize_t)r.runs.size());
    for (size_t i = 0; fp && i < r.runs.size(); i++) {
      PyObject* run = Py_BuildValue("(LL)", (long long)r.runs[i].first, (long long)r.runs[i].second);
      if (!run) { Py_CLEAR(fp); break; }
      PyTuple_SET_ITEM(fp, (Py_ssize_t)i, run);
    }
  }
  return fp ? Py_BuildValue("(NON)", PyLong_FromVoidPtr(r.ptr), (PyObject*)torch::getTHPDtype(r.dtype), fp) : nullptr;
}

// probe(t) -> None (left to the Python path) or (meta, version or None, leaf that requires grad, memory key or
// None): what dumper._meta, Tensor._version, requires_grad and is_leaf, and dumper._memory_key give
PyObject* probe(PyObject*, PyObject* o) {
  if (!plain(o)) Py_RETURN_NONE;
  Reads r;
  try {
    const at::Tensor& t = THPVariable_Unpack(o);
    if (!t.defined()) Py_RETURN_NONE;
    read_tensor(t, r);
  } catch (const std::exception&) {
    Py_RETURN_NONE;  // nothing made yet: the Python path reads it (and says what is wrong, if anything)
  }
  PyObject* meta = make_meta(r);
  if (!meta) return nullptr;
  if (r.inference) return Py_BuildValue("(NOOO)", meta, Py_None, r.leaf ? Py_True : Py_False, Py_None);
  PyObject* skey = make_skey(r);
  if (!skey) { Py_DECREF(meta); return nullptr; }
  return Py_BuildValue("(NLON)", meta, (long long)r.version, r.leaf ? Py_True : Py_False, skey);
}

// fill(t, row, head or None, plans, privateuse1_is_host, defer_min) -> 1: the row written (a contiguous float32,
// bfloat16 or float16 tensor in host memory whose fingerprint plan is in plans); 2: not read, to be deferred
// (defer_min > 0 and the tensor, which it could read, has at least that many elements: StatTable.add); 0: not
// handled here (the Python path decides: another dtype or layout, an empty tensor, a plan not built yet).
// fill's work: -1 on a Python error, else what fill returns
// stats._offsets in C++: a strided layout's sample offsets, computed once per layout (sizes and strides; the samples
// follow from the element count), 256 layouts at most (then forgotten, as the Python cache is)
// (with the GIL held; the caller keeps the shared pointer while the kernel runs without it)
std::unordered_map<std::string, std::shared_ptr<std::vector<int64_t>>> layouts;
std::shared_ptr<std::vector<int64_t>> layout_offsets(int64_t nd, const int64_t* dims, const int64_t* pos, int64_t k) {
  std::string key((const char*)dims, nd * sizeof(int64_t));
  key.append((const char*)(dims + MAXDIM), nd * sizeof(int64_t));
  auto it = layouts.find(key);
  if (it == layouts.end()) {
    if (layouts.size() >= 256) layouts.clear();
    auto offs = std::make_shared<std::vector<int64_t>>(k);
    offsets_fn((int)nd, dims, pos, k, offs->data());
    it = layouts.emplace(std::move(key), std::move(offs)).first;
  }
  return it->second;
}

int fill_core(PyObject* o, float* out, const float* head, PyObject* plans, bool pu1_host, long long defer_min) {
  if (!plain(o)) return 0;
  try {
    const at::Tensor& t = THPVariable_Unpack(o);
    int kind;
    switch (t.scalar_type()) {
      case c10::kFloat: kind = 0; break;
      case c10::kBFloat16: kind = 1; break;
      case c10::kHalf: kind = 2; break;
      default: return 0;
    }
    if (!kinds[kind] || t.layout() != c10::kStrided || !t.has_storage()) return 0;
    if (!t.is_cpu() && !(pu1_host && t.device().type() == c10::DeviceType::PrivateUse1)) return 0;
    int64_t nd = t.dim();
    int64_t numel = t.numel();
    bool dense = t.is_contiguous();
    if (nd > MAXDIM || numel == 0 || (!dense && !offsets_fn)) return 0;
    const void* x = t.data_ptr();
    if (!x) return 0;
    if (dense && defer_min > 0 && numel >= defer_min && !t.is_inference()) return 2;  // it has a version
    PyObject* key = PyLong_FromLongLong(numel);
    if (!key) return -1;
    PyObject* plan = PyDict_GetItemWithError(plans, key);
    Py_DECREF(key);
    if (!plan) return PyErr_Occurred() ? -1 : 0;
    if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) < 5) return 0;
    PyObject* pp = PyTuple_GET_ITEM(plan, 0);
    const int64_t* pos = pp == Py_None ? nullptr : (const int64_t*)PyLong_AsVoidPtr(pp);
    int64_t k = PyLong_AsLongLong(PyTuple_GET_ITEM(plan, 1));
    const float* w = (const float*)PyLong_AsVoidPtr(PyTuple_GET_ITEM(plan, 2));
    double scale = PyFloat_AsDouble(PyTuple_GET_ITEM(plan, 3));
    if (PyErr_Occurred()) return -1;
    if (!out || !w) { PyErr_SetString(PyExc_ValueError, "fill: a null pointer"); return -1; }
    int64_t dims[2 * MAXDIM];
    auto sizes = t.sizes();
    auto strides = t.strides();
    for (int64_t d = 0; d < nd; d++) { dims[d] = sizes[d]; dims[MAXDIM + d] = strides[d]; }
    std::shared_ptr<std::vector<int64_t>> held;
    if (!dense) held = layout_offsets(nd, dims, pos, k);
    const int64_t* offs = held ? held->data() : nullptr;
    Py_INCREF(plan);  // its tensors (positions, weights) stay alive while the GIL is released
    Py_BEGIN_ALLOW_THREADS
    kinds[kind](x, (int)nd, dims, pos, k, w, (float)scale, head, out, offs);
    Py_END_ALLOW_THREADS
    Py_DECREF(plan);
    return 1;
  } catch (const std::exception&) {
    return 0;
  }
}

PyObject* fill(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (n != 6) { PyErr_SetString(PyExc_TypeError, "fill takes 6 arguments"); return nullptr; }
  if (!plain(a[0])) return PyLong_FromLong(0);
  long long defer_min = PyLong_AsLongLong(a[5]);
  if (defer_min == -1 && PyErr_Occurred()) return nullptr;
  float* out = (float*)PyLong_AsVoidPtr(a[1]);
  const float* head = a[2] == Py_None ? nullptr : (const float*)PyLong_AsVoidPtr(a[2]);
  if (PyErr_Occurred()) return nullptr;
  if (!PyDict_Check(a[3])) { PyErr_SetString(PyExc_TypeError, "fill: plans must be a dict"); return nullptr; }
  int got = fill_core(a[0], out, head, a[3], a[4] == Py_True, defer_min);
  return got < 0 ? nullptr : PyLong_FromLong(got);
}

// ----------------------------------------------------------------------------------- the recording of a tensor
// What Dumper._item_graph does for a tensor, with the probe's reads: _stat_probed, then for a tensor not seen in
// this step (and not a view of a summarised one) _stat_new, StatTable.add and _remember, touching the same Python
// objects (the dumper's _seen and _storage, the table's rows). Whatever is less common is the Python methods' own
// work, called from here: a parameter (_param_stat), a view of a summarised tensor's memory or a table with a
// deferred row (_stat_new), what the kernel does not read (StatTable._fill), tensor and checksum modes (_keep).
// The Python path is the reference (tests/precision/test_fastrec.py).

struct Ref {  // an owned reference
  PyObject* p = nullptr;
  Ref() = default;
  explicit Ref(PyObject* o) : p(o) {}
  ~Ref() { Py_XDECREF(p); }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  PyObject* get() const { return p; }
  explicit operator bool() const { return p != nullptr; }
  void reset(PyObject* o) { Py_XDECREF(p); p = o; }
  PyObject* release() { PyObject* o = p; p = nullptr; return o; }
};

struct Names {
  PyObject *seen, *storage, *table, *keeps, *param_stat, *stat_new, *keep, *pending, *n, *cap, *host, *base, *none,
      *next, *fill, *value, *watch_list, *watch_grad, *item_graph_py, *args, *output, *cfill, *plans, *pu1_host,
      *dev, *fill_view, *stack, *params_seen, *grad_targets, *hook_grad;
} N;
PyObject* stats_globals = nullptr;  // the stats module's dict (its _cfill, _plans, _pu1_host)
PyObject* own_fill = nullptr;       // this module's fill, as stats._cfill holds it when the recorder is on
PyObject* arg_keys[64];             // "0" .. "63"
long long defer_min = 0, row_bytes = 0;

// connect(stats module dict, fill, defer_min, row bytes)
PyObject* connect(PyObject*, PyObject* args) {
  PyObject *g, *f;
  long long dm, rb;
  if (!PyArg_ParseTuple(args, "O!OLL", &PyDict_Type, &g, &f, &dm, &rb)) return nullptr;
  if (!N.seen) {
    const char* names[] = {"_seen", "_storage", "_table", "_keeps", "_param_stat", "_stat_new", "_keep", "pending",
                           "n", "_cap", "_host", "_base", "_none", "_next", "_fill", "_value", "_watch_list",
                           "_watch_grad", "_item_graph_py", "args", "output", "_cfill", "_plans", "_pu1_host", "_dev",
                           "_fill_view", "_stack", "_params_seen", "_grad_targets", "_hook_grad"};
    PyObject** slots[] = {&N.seen, &N.storage, &N.table, &N.keeps, &N.param_stat, &N.stat_new, &N.keep, &N.pending,
                          &N.n, &N.cap, &N.host, &N.base, &N.none, &N.next, &N.fill, &N.value, &N.watch_list,
                          &N.watch_grad, &N.item_graph_py, &N.args, &N.output, &N.cfill, &N.plans, &N.pu1_host, &N.dev,
                          &N.fill_view, &N.stack, &N.params_seen, &N.grad_targets, &N.hook_grad};
    static_assert(sizeof(names) / sizeof(names[0]) == sizeof(slots) / sizeof(slots[0]));
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
      *slots[i] = PyUnicode_InternFromString(names[i]);
      if (!*slots[i]) return nullptr;
    }
    for (int i = 0; i < 64; i++) {
      arg_keys[i] = PyUnicode_FromFormat("%d", i);
      if (!arg_keys[i]) return nullptr;
    }
  }
  Py_INCREF(g); Py_XSETREF(stats_globals, g);
  Py_INCREF(f); Py_XSETREF(own_fill, f);
  defer_min = dm;
  row_bytes = rb;
  Py_RETURN_NONE;
}

// a borrowed entry of the stats module (nullptr with an error when it is missing)
PyObject* stats_get(PyObject* name) {
  PyObject* v = PyDict_GetItemWithError(stats_globals, name);
  if (!v && !PyErr_Occurred()) PyErr_Format(PyExc_AttributeError, "fastrec: stats has no %U", name);
  return v;
}

// StatTable._next: the next row's index (a new reference), its number and the table's base address
PyObject* next_row(PyObject* table, long long* i, unsigned long long* b) {
  Ref n(PyObject_GetAttr(table, N.n)), cap(PyObject_GetAttr(table, N.cap)), host(PyObject_GetAttr(table, N.host)),
      base(PyObject_GetAttr(table, N.base));
  if (!n || !cap || !host || !base) return nullptr;
  *i = PyLong_AsLongLong(n.get());
  long long c = PyLong_AsLongLong(cap.get());
  if (PyErr_Occurred()) return nullptr;
  Ref idx;
  if (host.get() == Py_None || *i == c) {
    idx.reset(PyObject_CallMethodNoArgs(table, N.next));
    if (!idx) return nullptr;
    base.reset(PyObject_GetAttr(table, N.base));  // made or grown
    if (!base) return nullptr;
    *i = PyLong_AsLongLong(idx.get());
    if (PyErr_Occurred()) return nullptr;
  } else {
    Ref next(PyLong_FromLongLong(*i + 1));
    if (!next || PyObject_SetAttr(table, N.n, next.get()) < 0) return nullptr;
    idx.reset(n.release());
  }
  *b = PyLong_AsUnsignedLongLong(base.get());
  if (PyErr_Occurred()) return nullptr;
  return idx.release();
}

// the kernel call's plans (stats._plans, borrowed, held by `held`) and whether privateuse1 is host memory (`pu1`)
bool kernel_args(PyObject** plans, Ref& held, Ref& pu1) {
  *plans = stats_get(N.plans);
  PyObject* pu1_fn = *plans ? stats_get(N.pu1_host) : nullptr;
  if (PyErr_Occurred() || !*plans || !PyDict_Check(*plans) || !pu1_fn) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "fastrec: stats._plans is not a dict");
    return false;
  }
  Py_INCREF(*plans);  // held across _pu1_host(), which runs Python
  held.reset(*plans);
  pu1.reset(PyObject_CallNoArgs(pu1_fn));
  return (bool)pu1;
}

// StatTable.add's row and kernel call: the next row into `idx`, then fill_core with the statistics of row `head`
// (-1: none) and `dmin` (0: never deferred); fill_core's answer, -1 with an error
int add_row(PyObject* table, PyObject* o, long long head, long long dmin, Ref& idx) {
  long long i;
  unsigned long long b;
  idx.reset(next_row(table, &i, &b));
  if (!idx) return -1;
  PyObject* plans;
  Ref held, pu1;
  if (!kernel_args(&plans, held, pu1)) return -1;
  const float* h = head >= 0 ? (const float*)(uintptr_t)(b + (unsigned long long)(head * row_bytes)) : nullptr;
  return fill_core(o, (float*)(uintptr_t)(b + (unsigned long long)(i * row_bytes)), h, plans, pu1.get() == Py_True,
                   dmin);
}

// the end of _stat_new and _param_stat: tensor and checksum modes keep something of the tensor (Dumper._keep); the
// row, released from `idx`, or nullptr with an error
PyObject* kept_row(PyObject* d, PyObject* o, Ref& idx) {
  Ref keeps(PyObject_GetAttr(d, N.keeps));
  if (!keeps) return nullptr;
  int k = PyObject_IsTrue(keeps.get());
  if (k < 0) return nullptr;
  if (k) {
    Ref kept(PyObject_CallMethodObjArgs(d, N.keep, o, idx.get(), nullptr));
    if (!kept) return nullptr;
  }
  return idx.release();
}

// Dumper._stat_new for a tensor whose memory no valid entry of _storage names, on a table without a deferred row,
// with the C++ kernel call as stats._cfill: StatTable.add, then _remember; the rest is the Python method's
PyObject* stat_new(PyObject* d, PyObject* o, const Reads& r, PyObject* id, PyObject* ver, bool defer,
                   PyObject* seen) {
  Ref skey(make_skey(r));
  if (!skey) return nullptr;
  Ref storage(PyObject_GetAttr(d, N.storage)), table(PyObject_GetAttr(d, N.table));
  if (!storage || !table) return nullptr;
  Ref none(PyObject_GetAttr(table.get(), N.none));
  if (!none) return nullptr;
  bool python = !PyDict_Check(storage.get()) || !PyAnySet_Check(none.get());
  Ref view;  // the valid entry of this memory (the newest tensor over it still lives, unchanged): t is a view of it
  long long view_row = -1;
  if (!python && skey.get() != Py_None) {
    PyObject* base = PyDict_GetItemWithError(storage.get(), skey.get());
    if (base) {
      if (!PyTuple_CheckExact(base) || PyTuple_GET_SIZE(base) != 3) python = true;
      else {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(base, 1), ver, Py_EQ);
        if (eq < 0) return nullptr;
        PyObject* ref = PyTuple_GET_ITEM(base, 0);
        if (eq && PyWeakref_Check(ref) && PyWeakref_GetObject(ref) != Py_None) {
          int gone = PySet_Contains(none.get(), PyTuple_GET_ITEM(base, 2));
          if (gone < 0) return nullptr;
          if (!gone) {  // StatTable.add_view: its statistics, the view's own fingerprint
            Py_INCREF(base);
            view.reset(base);
            view_row = PyLong_AsLongLong(PyTuple_GET_ITEM(base, 2));
            if (view_row == -1 && PyErr_Occurred()) return nullptr;
            Ref dev(PyObject_GetAttr(table.get(), N.dev));  // a row torch computed: the Python path
            if (!dev) return nullptr;
            int on_dev = PyDict_Check(dev.get()) ? PyDict_Contains(dev.get(), PyTuple_GET_ITEM(base, 2)) : 1;
            if (on_dev < 0) return nullptr;
            python = on_dev || view_row < 0;
          }
        } else if (eq && !PyWeakref_Check(ref)) python = true;
      }
    } else if (PyErr_Occurred()) return nullptr;
  }
  Ref pending;
  if (!python) {
    pending.reset(PyObject_GetAttr(table.get(), N.pending));
    if (!pending) return nullptr;
    python = pending.get() != Py_None;
  }
  // a tensor the kernel call does not read but StatTable.add may still defer (more than MAXDIM dimensions): Python
  if (defer && r.sizes.size() > (size_t)MAXDIM) python = true;
  PyObject* cfill = python ? nullptr : stats_get(N.cfill);
  if (!python && !cfill) return nullptr;
  if (python || cfill != own_fill)  // None (the Python path only) or a replacement (a test's, the benchmark's)
    return PyObject_CallMethodObjArgs(d, N.stat_new, o, ver, skey.get(), defer ? Py_True : Py_False, nullptr);

  // StatTable.add: the next row (StatTable._next when the table must be made or grown), the kernel
  Ref idx;
  int got = add_row(table.get(), o, view ? view_row : -1, defer && !view ? defer_min : 0, idx);
  if (got < 0) return nullptr;
  if (view) {  // add_view's row; the rest of _fill_view (another dtype, no statistics) in Python
    if (got == 0) {
      Ref done(PyObject_CallMethodObjArgs(table.get(), N.fill_view, PyTuple_GET_ITEM(view.get(), 2), o, idx.get(),
                                          nullptr));
      if (!done) return nullptr;
    }
    // _remember(t, ver, skey, idx, base): the newest tensor over this memory keeps its entry valid
    Ref ref(PyWeakref_NewRef(o, nullptr));
    if (ref) {
      Ref entry(PyTuple_Pack(3, ref.get(), ver, idx.get())), mem(PyTuple_Pack(3, ref.get(), ver,
                                                                              PyTuple_GET_ITEM(view.get(), 2)));
      if (!entry || !mem || PyDict_SetItem(seen, id, entry.get()) < 0 ||
          PyDict_SetItem(storage.get(), skey.get(), mem.get()) < 0)
        return nullptr;
    } else {
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) return nullptr;
      PyErr_Clear();
    }
  } else if (got == 2) {  // deferred: read at the next call (StatTable.settle)
    Ref p(PyTuple_Pack(3, o, idx.get(), ver));
    if (!p || PyObject_SetAttr(table.get(), N.pending, p.get()) < 0) return nullptr;
  } else if (got == 0) {  // another dtype or layout, a plan not built yet: StatTable._fill, as add would
    Ref done(PyObject_CallMethodObjArgs(table.get(), N.fill, o, idx.get(), Py_True, nullptr));
    if (!done) return nullptr;
  }
  if (!view) {
  // _stat_new's end: the memory's entry, then _remember(t, ver, skey, idx, None)
  int gone = PySet_Contains(none.get(), idx.get());
  if (gone < 0) return nullptr;
  if (skey.get() != Py_None && !gone && PyDict_DelItem(storage.get(), skey.get()) < 0) {
    if (!PyErr_ExceptionMatches(PyExc_KeyError)) return nullptr;
    PyErr_Clear();
  }
  Ref ref(PyWeakref_NewRef(o, nullptr));
  if (ref) {
    Ref entry(PyTuple_Pack(3, ref.get(), ver, idx.get()));
    if (!entry || PyDict_SetItem(seen, id, entry.get()) < 0) return nullptr;
    if (skey.get() != Py_None && !gone && PyDict_SetItem(storage.get(), skey.get(), entry.get()) < 0) return nullptr;
  } else {
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) return nullptr;
    PyErr_Clear();  // no weak reference to it: not remembered (as _remember)
  }
  }
  return kept_row(d, o, idx);
}

// Dumper._param_stat(t, key, ver): a parameter's row (a leaf that requires grad; no weak reference to it), once per
// top-level call; a table with a deferred row, or a replaced stats._cfill: the Python method
PyObject* param_stat(PyObject* d, PyObject* o, PyObject* key, PyObject* ver) {
  auto python = [&]() { return PyObject_CallMethodObjArgs(d, N.param_stat, o, key, ver, nullptr); };
  Ref stack(PyObject_GetAttr(d, N.stack)), seen(PyObject_GetAttr(d, N.params_seen)), table(PyObject_GetAttr(d, N.table));
  if (!stack || !seen || !table) return nullptr;
  if (!PyList_Check(stack.get()) || !PyDict_Check(seen.get())) return python();
  bool inside = PyList_GET_SIZE(stack.get()) > 0;
  if (inside) {
    PyObject* hit = PyDict_GetItemWithError(seen.get(), key);
    if (!hit && PyErr_Occurred()) return nullptr;
    if (hit) {
      if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 2) return python();
      int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(hit, 0), ver, Py_EQ);
      if (eq < 0) return nullptr;
      if (eq) { Py_INCREF(PyTuple_GET_ITEM(hit, 1)); return PyTuple_GET_ITEM(hit, 1); }
    }
  }
  Ref pending(PyObject_GetAttr(table.get(), N.pending));
  if (!pending) return nullptr;
  PyObject* cfill = stats_get(N.cfill);
  if (!cfill) return nullptr;
  if (pending.get() != Py_None || cfill != own_fill) return python();
  Ref idx;
  int got = add_row(table.get(), o, -1, 0, idx);
  if (got < 0) return nullptr;
  if (got == 0) {  // StatTable._fill, as add would
    Ref done(PyObject_CallMethodObjArgs(table.get(), N.fill, o, idx.get(), Py_True, nullptr));
    if (!done) return nullptr;
  }
  if (inside) {
    Ref e(PyTuple_Pack(2, ver, idx.get()));
    if (!e || PyDict_SetItem(seen.get(), key, e.get()) < 0) return nullptr;
  }
  return kept_row(d, o, idx);
}

// Dumper._stat_probed: the row of the tensor, from _seen when it was summarised at this version
PyObject* stat_probed(PyObject* d, PyObject* o, const Reads& r, bool defer) {
  Ref id(PyLong_FromVoidPtr(o));
  if (!id) return nullptr;
  if (r.inference)  // no version counter: summarised every time, in Python
    return PyObject_CallMethodObjArgs(d, N.stat_new, o, Py_None, Py_None, defer ? Py_True : Py_False, nullptr);
  Ref ver(PyLong_FromLongLong(r.version));
  if (!ver) return nullptr;
  if (r.leaf) return param_stat(d, o, id.get(), ver.get());
  Ref seen(PyObject_GetAttr(d, N.seen));
  if (!seen) return nullptr;
  if (!PyDict_Check(seen.get())) { PyErr_SetString(PyExc_TypeError, "fastrec: Dumper._seen is not a dict"); return nullptr; }
  PyObject* hit = PyDict_GetItemWithError(seen.get(), id.get());
  if (hit) {
    if (PyTuple_CheckExact(hit) && PyTuple_GET_SIZE(hit) == 3) {
      int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(hit, 1), ver.get(), Py_EQ);
      if (eq < 0) return nullptr;
      PyObject* ref = PyTuple_GET_ITEM(hit, 0);
      if (eq && PyWeakref_Check(ref) && PyWeakref_GetObject(ref) == o) {
        PyObject* i = PyTuple_GET_ITEM(hit, 2);
        Py_INCREF(i);
        return i;
      }
    }
  } else if (PyErr_Occurred()) return nullptr;
  return stat_new(d, o, r, id.get(), ver.get(), defer, seen.get());
}

// 1: *item = (key, meta, row) and *graph (requires grad, not a leaf); 0: left to the Python path; -1: an error
int item_core(PyObject* d, PyObject* o, PyObject* key, bool defer, PyObject** item, bool* graph) {
  if (!plain(o)) return 0;
  Reads r;
  try {
    const at::Tensor& t = THPVariable_Unpack(o);
    if (!t.defined()) return 0;
    read_tensor(t, r);
  } catch (const std::exception&) {
    return 0;
  }
  Ref meta(make_meta(r));
  if (!meta) return -1;
  PyObject* idx = stat_probed(d, o, r, defer);
  if (!idx) return -1;
  *item = PyTuple_Pack(3, key, meta.get(), idx);
  Py_DECREF(idx);
  if (!*item) return -1;
  *graph = r.requires_grad && !r.leaf;
  return 1;
}

// Dumper._item_graph: (key, meta, row), a new reference, and *graph; the Python path where item_core leaves it
PyObject* item_graph(PyObject* d, PyObject* o, PyObject* key, bool defer, bool* graph) {
  PyObject* it = nullptr;
  int got = item_core(d, o, key, defer, &it, graph);
  if (got < 0) return nullptr;
  if (got == 1) return it;
  Ref res(PyObject_CallMethodObjArgs(d, N.item_graph_py, o, key, defer ? Py_True : Py_False, nullptr));
  if (!res) return nullptr;
  if (!PyTuple_Check(res.get()) || PyTuple_GET_SIZE(res.get()) != 2) {
    PyErr_SetString(PyExc_TypeError, "fastrec: _item_graph_py gave no pair");
    return nullptr;
  }
  int g = PyObject_IsTrue(PyTuple_GET_ITEM(res.get(), 1));
  if (g < 0) return nullptr;
  *graph = g;
  PyObject* itm = PyTuple_GET_ITEM(res.get(), 0);
  Py_INCREF(itm);
  return itm;
}

// item(d, t, key, defer) -> ((key, meta, row), requires grad and not a leaf), or None: Dumper._item_graph's
// answer, or the Python path's to give (a tensor subclass, an undefined tensor)
// item's and inputs' arguments (d, x, y, flag): the flag's truth, or -1 with an error
int fourth_flag(const char* name, PyObject* const* a, Py_ssize_t n) {
  if (n != 4) { PyErr_Format(PyExc_TypeError, "%s takes 4 arguments", name); return -1; }
  if (!stats_globals) { PyErr_SetString(PyExc_RuntimeError, "fastrec: connect() first"); return -1; }
  return PyObject_IsTrue(a[3]);
}

PyObject* item(PyObject*, PyObject* const* a, Py_ssize_t n) {
  int defer = fourth_flag("item", a, n);
  if (defer < 0) return nullptr;
  PyObject* it = nullptr;
  bool graph = false;
  int got = item_core(a[0], a[1], a[2], defer, &it, &graph);
  if (got < 0) return nullptr;
  if (got == 0) Py_RETURN_NONE;
  return Py_BuildValue("(NO)", it, graph ? Py_True : Py_False);
}


// dumper._scalar for None and the exact types bool, int, float, str: ScalarArg(type name, value, key)
PyObject* scalar_cls = nullptr;  // precision.model.ScalarArg (mode_connect); null: Dumper._value does it
PyObject* scalar_names[5];       // "NoneType", "bool", "int", "float", "str"
PyObject* plain_scalar_name(PyObject* x) {
  if (x == Py_None) return scalar_names[0];
  if (PyBool_Check(x)) return scalar_names[1];
  if (PyLong_CheckExact(x)) return scalar_names[2];
  if (PyFloat_CheckExact(x)) return scalar_names[3];
  if (PyUnicode_CheckExact(x)) return scalar_names[4];
  return nullptr;
}
bool append_scalar(PyObject* x, PyObject* name, PyObject* key, PyObject* out) {
  PyObject* argv[3] = {name, x, key};
  Ref sa(PyObject_Vectorcall(scalar_cls, argv, 3, nullptr));
  if (!sa) return false;
  Ref it(PyTuple_Pack(3, key, sa.get(), Py_None));
  return it && PyList_Append(out, it.get()) == 0;
}

// Dumper._value(x, key, out) where x is a plain scalar, or an exact list or tuple of them (a shape, a list of
// dims: items "key.0", "key.1", ...): 1; 0 for anything else (Dumper._value's), -1 for an error
int plain_values(PyObject* x, PyObject* key, PyObject* out) {
  if (!scalar_cls) return 0;
  if (PyObject* name = plain_scalar_name(x)) return append_scalar(x, name, key, out) ? 1 : -1;
  if (!PyList_CheckExact(x) && !PyTuple_CheckExact(x)) return 0;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(x);
  if (n == 0) return 0;
  for (Py_ssize_t i = 0; i < n; i++)
    if (!plain_scalar_name(PySequence_Fast_GET_ITEM(x, i))) return 0;
  Ref items(PySequence_Tuple(x));  // (a list could change while ScalarArg's Python runs)
  if (!items) return -1;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* v = PyTuple_GET_ITEM(items.get(), i);
    Ref k(PyUnicode_FromFormat("%U.%zd", key, i));
    if (!k || !append_scalar(v, plain_scalar_name(v), k.get(), out)) return -1;
  }
  return 1;
}

// Dumper._watch_grad(t, rec, side, key, idx): rec's backward node takes t's gradient; one hook per row
// (Dumper._hook_grad makes it), the first time the row is watched
bool watch_grad(PyObject* d, PyObject* t, PyObject* rec, PyObject* side, PyObject* key, PyObject* idx) {
  Ref gt(idx == Py_None ? nullptr : PyObject_GetAttr(d, N.grad_targets));
  if (idx != Py_None && !gt) return false;
  if (idx == Py_None || !PyDict_Check(gt.get())) {
    Ref w(PyObject_CallMethodObjArgs(d, N.watch_grad, t, rec, side, key, idx, nullptr));
    return (bool)w;
  }
  PyObject* targets = PyDict_GetItemWithError(gt.get(), idx);
  Ref held;
  if (targets) {
    Py_INCREF(targets);
    held.reset(targets);
  } else {
    if (PyErr_Occurred()) return false;
    held.reset(PyList_New(0));
    if (!held || PyDict_SetItem(gt.get(), idx, held.get()) < 0) return false;
    Ref h(PyObject_CallMethodObjArgs(d, N.hook_grad, t, held.get(), nullptr));
    if (!h) return false;
  }
  if (!PyList_Check(held.get())) { PyErr_SetString(PyExc_TypeError, "fastrec: a gradient's targets"); return false; }
  Ref entry(PyTuple_Pack(3, rec, side, key));
  return entry && PyList_Append(held.get(), entry.get()) == 0;
}

// Dumper._record_inputs for the positional arguments `args` (keyword arguments: Python)
bool inputs_core(PyObject* d, PyObject* rec, PyObject* args, bool watch) {
  // a tuple (the loop calls back into Python, which could change a list under it)
  Ref seq(PyTuple_Check(args) ? (Py_INCREF(args), args) : PySequence_Tuple(args));
  if (!seq) return false;
  Ref out(PyObject_GetAttr(rec, N.args));
  if (!out) return false;
  Py_ssize_t count = PySequence_Fast_GET_SIZE(seq.get());
  for (Py_ssize_t i = 0; i < count; i++) {
    PyObject* x = PySequence_Fast_GET_ITEM(seq.get(), i);
    Ref key;
    if (i < 64) { Py_INCREF(arg_keys[i]); key.reset(arg_keys[i]); }
    else key.reset(PyUnicode_FromFormat("%zd", i));
    if (!key) return false;
    // isinstance(a, torch.Tensor), as the Python path asks it: an object whose __class__ raises raises here too
    int is_tensor = plain(x) ? 1 : PyObject_IsInstance(x, THPVariableClass);
    if (is_tensor < 0) return false;
    if (is_tensor) {
      bool graph = false;
      Ref itm(item_graph(d, x, key.get(), false, &graph));
      if (!itm) return false;
      if (PyList_Append(out.get(), itm.get()) < 0) return false;
      PyObject* row = PyTuple_Check(itm.get()) && PyTuple_GET_SIZE(itm.get()) == 3 ? PyTuple_GET_ITEM(itm.get(), 2)
                                                                                    : Py_None;
      if (watch && graph && row != Py_None) {
        if (!watch_grad(d, x, rec, N.output, key.get(), row)) return false;
      }
    } else {
      int done = plain_values(x, key.get(), out.get());  // ints, floats, a shape: no Python frame
      if (done < 0) return false;
      if (done) continue;
      Ref v(PyObject_CallMethodObjArgs(d, N.value, x, key.get(), out.get(), nullptr));
      if (!v) return false;
      if (watch && (PyList_Check(x) || PyTuple_Check(x))) {
        Ref w(PyObject_CallMethodObjArgs(d, N.watch_list, x, rec, key.get(), nullptr));
        if (!w) return false;
      }
    }
  }
  return true;
}

// inputs(d, rec, args, watch): inputs_core as a function
PyObject* inputs(PyObject*, PyObject* const* a, Py_ssize_t n) {
  int watch = fourth_flag("inputs", a, n);
  if (watch < 0) return nullptr;
  if (!inputs_core(a[0], a[1], a[2], watch)) return nullptr;
  Py_RETURN_NONE;
}

// ------------------------------------------------------------------------------------- the mode's handler
// _ApiMode.__torch_function__ for the common recorded call (dumper.py): a torch function the mode has named before
// (_api_cache), while the dumper records, outside the optimizer, with no scope, autocast off, no deferred row and no
// emulator: _begin_api (_new_rec, the inputs), the call, and _end for a single tensor out. Everything else is the
// Python handler's, called as it is (`py_handler`); the rules that are not the handler's own (a keyword input, the
// outputs of a copy or split call or of several tensors, a gradient hook) call the dumper's methods. The Python
// handler is the reference (tests/precision/test_fastrec.py compares the dumps).
#if PY_VERSION_HEX >= 0x030B0000
#define FASTREC_MODE 1
struct ModeNames {
  PyObject *d, *busy, *recording, *stack, *in_optimizer, *skip_optimizer, *scope, *counts, *recs, *name, *source,
      *outputs, *backward, *end_body, *record_kwargs, *api, *forward, *input, *defer_outputs, *emulator, *kind, *module, *paths, *seen_, *storage_, *params_seen,
      *level, *record_params, *pre_hook, *post_hook, *lazy, *ac, *end, *path_of, *dunder_name, *parameters_, *params, *param_handles, *hook_param;
} M;
struct ModeConf {  // set by mode_connect (all owned)
  PyObject *py_handler, *api_cache, *opforms, *operator_forms, *copy_ops, *split_ops, *modules, *any_autocast,
      *rec_class, *skip, *skip_cache, *dumper_globals, *kernel_cache, *handler_code;
} C = {};

// dumper._program_frame(PyEval_GetFrame()): the calling code's frame (a new reference, or null), past the frames of
// the Python handler of a dump this one runs inside (the C++ handler is no frame)
PyFrameObject* program_frame() {
  PyFrameObject* f = PyEval_GetFrame();
  Py_XINCREF(f);
  while (f) {
    PyCodeObject* code = PyFrame_GetCode(f);
    bool handler = (PyObject*)code == C.handler_code;
    Py_DECREF(code);
    if (!handler) break;
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  return f;
}

// getattr(o, name) is true (-1: an error)
int attr_true(PyObject* o, PyObject* name) {
  Ref v(PyObject_GetAttr(o, name));
  if (!v) return -1;
  return PyObject_IsTrue(v.get());
}

// d._busy = value, keeping an exception in flight
bool set_busy(PyObject* d, bool value) {
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  int r = PyObject_SetAttr(d, M.busy, value ? Py_True : Py_False);
  if (t) { if (r < 0) PyErr_Clear(); PyErr_Restore(t, v, tb); return false; }
  return r == 0;
}

PyObject* call_func(PyObject* func, PyObject* args, PyObject* kwargs) {
  return PyObject_Call(func, args, kwargs != Py_None && PyDict_GET_SIZE(kwargs) ? kwargs : nullptr);
}

// the Python handler: py_handler(mode, *a, **kw)
PyObject* fallback(PyObject* mode, PyObject* const* a, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t n = PyVectorcall_NARGS(nargsf), nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  std::vector<PyObject*> all(n + nk + 1);
  all[0] = mode;
  for (Py_ssize_t i = 0; i < n + nk; i++) all[i + 1] = a[i];
  return PyObject_Vectorcall(C.py_handler, all.data(), n + 1, kwnames);
}

// msprobe's name for an operator written as one (``a * b``: Tensor.__mul__), from the calling code's instruction
// (dumper._operator_form; the table dumper._OPERATOR_TABLE is built there): a borrowed info, or `info`
PyObject* operator_form(PyObject* info) {
  PyFrameObject* f = program_frame();
  if (!f) return info;
  PyCodeObject* code = PyFrame_GetCode(f);
  int lasti = PyFrame_GetLasti(f);
  Py_DECREF(f);
  PyObject* bytes = PyCode_GetCode(code);
  Py_DECREF(code);
  if (!bytes) { PyErr_Clear(); return info; }
  PyObject* got = nullptr;
  if (lasti >= 0 && lasti + 1 < PyBytes_GET_SIZE(bytes)) {
    const unsigned char* c = (const unsigned char*)PyBytes_AS_STRING(bytes);
    Ref key(PyLong_FromLong(c[lasti] * 256 + c[lasti + 1]));
    if (key) got = PyDict_GetItemWithError(C.opforms, key.get());
    if (!got) PyErr_Clear();
  }
  Py_DECREF(bytes);
  return got ? got : info;
}

// user_frame(..., _CALLER) from the code that called the mode: (its code, its f_lasti), None, or nullptr (an error)
PyObject* caller_source() {
  PyFrameObject* f = PyEval_GetFrame();
  Py_XINCREF(f);
  while (f) {
    PyCodeObject* code = PyFrame_GetCode(f);
    PyObject* fn = code->co_filename;
    int skip;
    PyObject* s = PyDict_GetItemWithError(C.skip_cache, fn);
    if (s) skip = PyObject_IsTrue(s);
    else if (PyErr_Occurred()) skip = -1;
    else {
      Ref r(PyObject_CallOneArg(C.skip, fn));
      skip = r ? PyObject_IsTrue(r.get()) : -1;
    }
    if (skip <= 0) {
      PyObject* res = skip < 0 ? nullptr : Py_BuildValue("(Oi)", (PyObject*)code, PyFrame_GetLasti(f));
      Py_DECREF(code);
      Py_DECREF(f);
      return res;
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  Py_RETURN_NONE;
}

// Dumper._new_rec(base, kind, module_path, api, class_name), appended to the step's records; `cls`: null for an
// API call ("api"), else the module's class name ("module")
PyObject* new_rec(PyObject* d, PyObject* base, PyObject* module_path, PyObject* api, PyObject* stack,
                  PyObject* cls = nullptr) {
  Ref counts(PyObject_GetAttr(d, M.counts)), recs(PyObject_GetAttr(d, M.recs));
  if (!counts || !recs) return nullptr;
  if (!PyDict_Check(counts.get()) || !PyList_Check(recs.get())) {
    PyErr_SetString(PyExc_TypeError, "fastrec: Dumper._counts or _recs is not a dict or list");
    return nullptr;
  }
  PyObject* had = PyDict_GetItemWithError(counts.get(), base);
  if (!had && PyErr_Occurred()) return nullptr;
  long long n = had ? PyLong_AsLongLong(had) : 0;
  if (n == -1 && PyErr_Occurred()) return nullptr;
  Ref count(PyLong_FromLongLong(n)), next(PyLong_FromLongLong(n + 1));
  if (!count || !next || PyDict_SetItem(counts.get(), base, next.get()) < 0) return nullptr;
  Ref name(cls ? PyUnicode_FromFormat("%U.forward.%lld", base, n) : PyUnicode_FromFormat("%U.%lld.forward", base, n));
  if (!name) return nullptr;
  Ref parent;
  for (Py_ssize_t i = PyList_GET_SIZE(stack) - 1; i >= 0 && !parent; i--) {
    PyObject* e = PyList_GET_ITEM(stack, i);
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 3) { PyErr_SetString(PyExc_TypeError, "fastrec: a stack entry"); return nullptr; }
    PyObject* r = PyTuple_GET_ITEM(e, 2);
    if (r != Py_None) {
      parent.reset(PyObject_GetAttr(r, M.name));
      if (!parent) return nullptr;
    }
  }
  if (!parent) { Py_INCREF(Py_None); parent.reset(Py_None); }
  Ref order(PyLong_FromSsize_t(PyList_GET_SIZE(recs.get())));
  if (!order) return nullptr;
  PyObject* argv[10] = {name.get(), cls ? M.module : M.api, M.forward, count.get(), order.get(), module_path, api,
                        cls ? cls : Py_None, parent.get(), base};
  Ref rec(PyObject_Vectorcall(C.rec_class, argv, 10, nullptr));
  if (!rec) return nullptr;
  Ref src(caller_source());
  if (!src) return nullptr;
  if (src.get() != Py_None && PyObject_SetAttr(rec.get(), M.source, src.get()) < 0) return nullptr;
  if (PyList_Append(recs.get(), rec.get()) < 0) return nullptr;
  return rec.release();
}

// any item of `items` names a statistics row (dumper._has_tensor)
int has_tensor(PyObject* rec, PyObject* name) {
  Ref items(PyObject_GetAttr(rec, name));
  if (!items) return -1;
  if (!PyList_Check(items.get())) { PyErr_SetString(PyExc_TypeError, "fastrec: a record's items"); return -1; }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items.get()); i++) {
    PyObject* it = PyList_GET_ITEM(items.get(), i);
    if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) < 3) { PyErr_SetString(PyExc_TypeError, "fastrec: an item"); return -1; }
    if (PyTuple_GET_ITEM(it, 2) != Py_None) return 1;
  }
  return 0;
}

// Dumper._end_body(rec, out, grad_on) for an API call (`api`: its name) or a module's (`api` null): one tensor out
// (not a copy or split call) here, the rest in Python
bool end_rec(PyObject* d, PyObject* rec, PyObject* out, PyObject* api, bool grad_on) {
  int tensor = plain(out) ? 1 : PyObject_IsInstance(out, THPVariableClass);
  if (tensor < 0) return false;
  int special = 0;
  if (tensor && api) {
    special = PySet_Contains(C.copy_ops, api);
    if (special == 0) special = PySet_Contains(C.split_ops, api);
    if (special < 0) return false;
  }
  if (!tensor || special) {
    Ref r(PyObject_CallMethodObjArgs(d, M.end_body, rec, out, grad_on ? Py_True : Py_False, nullptr));
    return (bool)r;
  }
  int defer = 0;  // an API call's single output may wait for the next call (_DEFER_OUTPUTS)
  if (api) {
    PyObject* dv = PyDict_GetItemWithError(C.dumper_globals, M.defer_outputs);
    if (!dv) { if (!PyErr_Occurred()) PyErr_SetString(PyExc_AttributeError, "fastrec: no _DEFER_OUTPUTS"); return false; }
    defer = PyObject_IsTrue(dv);
    if (defer < 0) return false;
  }
  bool graph = false;
  Ref itm(item_graph(d, out, arg_keys[0], defer, &graph));
  if (!itm) return false;
  Ref outs(PyObject_GetAttr(rec, M.outputs));
  if (!outs || PyList_Append(outs.get(), itm.get()) < 0) return false;
  PyObject* row = PyTuple_Check(itm.get()) && PyTuple_GET_SIZE(itm.get()) == 3 ? PyTuple_GET_ITEM(itm.get(), 2)
                                                                                : Py_None;
  if (row == Py_None && api) {  // no row for the API call's output: a node only where an input has one
    int a = has_tensor(rec, N.args);
    if (a < 0) return false;
    int o = a ? 1 : has_tensor(rec, M.outputs);
    if (o < 0) return false;
    if (!o && PyObject_SetAttr(rec, M.kind, Py_None) < 0) return false;  // not a node (dropped at flush)
  }
  if (graph && grad_on) {
    int b = attr_true(d, M.backward);
    if (b < 0) return false;
    if (b) {
      if (!watch_grad(d, out, rec, M.input, arg_keys[0], row)) return false;
    }
  }
  return true;
}

// the handler, bound to the mode (its __self__, as torch asks of a mode's __torch_function__)
PyObject* handler(PyObject* mode, PyObject* const* a, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if ((kwnames && PyTuple_GET_SIZE(kwnames)) || n < 3 || n > 4) return fallback(mode, a, nargsf, kwnames);
  PyObject *func = a[0], *args = a[2], *kwargs = n > 3 ? a[3] : Py_None;
  if (!PyTuple_Check(args) || (kwargs != Py_None && !PyDict_Check(kwargs))) return fallback(mode, a, nargsf, kwnames);
  Ref d(PyObject_GetAttr(mode, M.d));
  if (!d) return nullptr;
  int busy = attr_true(d.get(), M.busy);
  if (busy < 0) return nullptr;
  if (busy) return call_func(func, args, kwargs);  // the dumper's own calls
  {
    Ref table(PyObject_GetAttr(d.get(), N.table));
    if (!table) return nullptr;
    Ref pending(PyObject_GetAttr(table.get(), N.pending));
    if (!pending) return nullptr;
    if (pending.get() != Py_None) return fallback(mode, a, nargsf, kwnames);
  }
  PyObject* info = PyDict_GetItemWithError(C.api_cache, func);
  if (!info) {
    if (PyErr_Occurred()) { if (!PyErr_ExceptionMatches(PyExc_TypeError)) return nullptr; PyErr_Clear(); }
    return fallback(mode, a, nargsf, kwnames);  // not named yet, or not hashable
  }
  int rec_on = attr_true(d.get(), M.recording);
  if (rec_on < 0) return nullptr;
  if (!rec_on) return fallback(mode, a, nargsf, kwnames);
  if (info == Py_None) return call_func(func, args, kwargs);
  int emu = PyDict_Contains(C.modules, M.emulator);
  if (emu < 0) return nullptr;
  if (emu) {  // the emulator is loaded: a call its kernel code made is not the program's (_from_emulator_kernel)
    PyFrameObject* f = program_frame();
    PyObject* known = Py_False;  // no frame: the program's (as _from_emulator_kernel says)
    if (f) {
      PyCodeObject* code = PyFrame_GetCode(f);
      known = PyDict_GetItemWithError(C.kernel_cache, code->co_filename);
      Py_DECREF(code);
      Py_DECREF(f);
      if (!known && PyErr_Occurred()) return nullptr;
    }
    if (known != Py_False) return fallback(mode, a, nargsf, kwnames);  // the kernel's, or a file not seen yet
  }
  if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 2) return fallback(mode, a, nargsf, kwnames);
  Ref held(info);  // the cache entry, held while Python runs
  Py_INCREF(info);
  int op = PySet_Contains(C.operator_forms, PyTuple_GET_ITEM(info, 0));
  if (op < 0) return nullptr;
  if (op) {
    info = operator_form(info);
    held.reset((Py_INCREF(info), info));
    if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 2) return fallback(mode, a, nargsf, kwnames);
  }
  int opt = attr_true(d.get(), M.in_optimizer);
  if (opt < 0) return nullptr;
  if (opt) {
    int skip = attr_true(d.get(), M.skip_optimizer);
    if (skip < 0) return nullptr;
    if (skip) return fallback(mode, a, nargsf, kwnames);
  }
  int scope = attr_true(d.get(), M.scope);
  if (scope < 0) return nullptr;
  if (scope) return fallback(mode, a, nargsf, kwnames);
  {
    Ref ac(PyObject_CallNoArgs(C.any_autocast));
    if (!ac) return nullptr;
    int on = PyObject_IsTrue(ac.get());
    if (on < 0) return nullptr;
    if (on) return fallback(mode, a, nargsf, kwnames);
  }
  // _begin_api
  PyObject *base = PyTuple_GET_ITEM(info, 0), *api = PyTuple_GET_ITEM(info, 1);
  Ref stack(PyObject_GetAttr(d.get(), M.stack));
  if (!stack) return nullptr;
  if (!PyList_Check(stack.get())) return fallback(mode, a, nargsf, kwnames);
  PyObject* module_path = Py_None;
  Py_ssize_t depth = PyList_GET_SIZE(stack.get());
  if (depth) {
    PyObject* top = PyList_GET_ITEM(stack.get(), depth - 1);
    if (!PyTuple_Check(top) || PyTuple_GET_SIZE(top) < 3) return fallback(mode, a, nargsf, kwnames);
    module_path = PyTuple_GET_ITEM(top, 1);
  }
  Ref mp((Py_INCREF(module_path), module_path));
  if (!set_busy(d.get(), true)) return nullptr;
  bool grad_on = at::GradMode::is_enabled();
  Ref rec(new_rec(d.get(), base, module_path, api, stack.get()));
  bool ok = (bool)rec;
  if (ok) {
    int backward = attr_true(d.get(), M.backward);
    ok = backward >= 0 && inputs_core(d.get(), rec.get(), args, backward && grad_on);
    if (ok && kwargs != Py_None && PyDict_GET_SIZE(kwargs)) {
      Ref r(PyObject_CallMethodObjArgs(d.get(), M.record_kwargs, rec.get(), kwargs,
                                       backward && grad_on ? Py_True : Py_False, nullptr));
      ok = (bool)r;
    }
  }
  if (!set_busy(d.get(), false) || !ok) return nullptr;
  Ref out(call_func(func, args, kwargs));
  if (!out) return nullptr;
  // _end
  if (!set_busy(d.get(), true)) return nullptr;
  ok = end_rec(d.get(), rec.get(), out.get(), api, at::GradMode::is_enabled());
  if (!set_busy(d.get(), false) || !ok) return nullptr;
  return out.release();
}

// torch-function modes off while the dumper records inside a module hook (dumper._quiet's DisableTorchFunction)
struct NoTorchFunction {
  at::impl::TorchFunctionDisabledState old;
  NoTorchFunction() : old(at::impl::PythonTorchFunctionTLS::get_disabled_state()) {
    at::impl::PythonTorchFunctionTLS::set_disabled_state(at::impl::TorchFunctionDisabledState::ALL_DISABLED);
  }
  ~NoTorchFunction() { at::impl::PythonTorchFunctionTLS::set_disabled_state(old); }
};

// Dumper._record_params(rec, module) for a module whose parameters are plain (no lazy one); from the first other
// one on, the Python method (which skips those recorded)
bool record_params(PyObject* d, PyObject* rec, PyObject* module) {
  auto python = [&]() {
    Ref r(PyObject_CallMethodObjArgs(d, M.record_params, rec, module, nullptr));
    return (bool)r;
  };
  Ref params(PyObject_GetAttr(module, M.parameters_)), rp(PyObject_GetAttr(rec, M.params)),
      lazy(PyObject_GetAttr(rec, M.lazy)), handles(PyObject_GetAttr(d, M.param_handles));
  if (!params || !rp || !lazy || !handles) return false;
  if (!PyDict_CheckExact(params.get()) || !PyDict_Check(rp.get()) || !PyDict_Check(handles.get()) ||
      lazy.get() != Py_None)
    return python();
  int backward = attr_true(d, M.backward);
  if (backward < 0) return false;
  Ref items(PyDict_Items(params.get()));  // a list: Python runs below, which could change the dict
  if (!items) return false;
  for (Py_ssize_t j = 0; j < PyList_GET_SIZE(items.get()); j++) {
    PyObject* kv = PyList_GET_ITEM(items.get(), j);
    PyObject *name = PyTuple_GET_ITEM(kv, 0), *p = PyTuple_GET_ITEM(kv, 1);
    if (p == Py_None) continue;
    int had = PyDict_Contains(rp.get(), name);
    if (had < 0) return false;
    if (had) continue;
    if (!plain(p)) return python();  // a lazy parameter (UninitializedParameter), a subclass
    Reads r;
    try {
      const at::Tensor& t = THPVariable_Unpack(p);
      if (!t.defined()) return python();
      read_tensor(t, r);
    } catch (const std::exception&) {
      return python();
    }
    Ref meta(make_meta(r));
    if (!meta) return false;
    Ref idx(stat_probed(d, p, r, false));
    if (!idx) return false;
    Ref pair(PyTuple_Pack(2, meta.get(), idx.get()));
    if (!pair || PyDict_SetItem(rp.get(), name, pair.get()) < 0) return false;
    if (backward && r.requires_grad) {
      Ref id(PyLong_FromVoidPtr(p));
      if (!id) return false;
      int hooked = PyDict_Contains(handles.get(), id.get());
      if (hooked < 0) return false;
      if (!hooked) {
        Ref h(PyObject_CallMethodObjArgs(d, M.hook_param, rec, name, p, nullptr));
        if (!h) return false;
      }
    }
  }
  return true;
}

// Dumper._pre_hook(module, args, kwargs) for the common module call (recording, no scope, autocast off); the rest,
// and the parameters (_record_params), in Python. Bound to the dumper.
PyObject* pre_hook(PyObject* d, PyObject* const* a, Py_ssize_t n) {
  if (n != 3) { PyErr_SetString(PyExc_TypeError, "the pre-hook takes 3 arguments"); return nullptr; }
  PyObject *module = a[0], *args = a[1], *kwargs = a[2];
  auto python = [&]() { return PyObject_CallMethodObjArgs(d, M.pre_hook, module, args, kwargs, nullptr); };
  int rec_on = attr_true(d, M.recording);
  if (rec_on < 0) return nullptr;
  int busy = rec_on ? attr_true(d, M.busy) : 0;
  if (busy < 0) return nullptr;
  if (!rec_on || busy || !PyTuple_Check(args) || !PyDict_Check(kwargs)) return python();
  int scope = attr_true(d, M.scope);
  if (scope < 0) return nullptr;
  if (scope) return python();
  Ref ac(PyObject_CallNoArgs(C.any_autocast));
  if (!ac) return nullptr;
  int on = PyObject_IsTrue(ac.get());
  if (on < 0) return nullptr;
  if (on) return python();
  Ref stack(PyObject_GetAttr(d, M.stack));
  if (!stack) return nullptr;
  if (!PyList_Check(stack.get())) return python();
  if (!PyList_GET_SIZE(stack.get())) {
    // a new top-level call: parameters may have changed through ``p.data``; summarise them afresh (_pre_hook)
    PyObject* names[3] = {M.seen_, M.storage_, M.params_seen};
    for (PyObject* nm : names) {
      Ref dct(PyObject_GetAttr(d, nm));
      if (!dct) return nullptr;
      if (!PyDict_Check(dct.get())) return python();
      PyDict_Clear(dct.get());
    }
  }
  Ref path;
  {
    Ref paths(PyObject_GetAttr(d, M.paths));
    if (!paths) return nullptr;
    Ref id(PyLong_FromVoidPtr(module));
    if (!id) return nullptr;
    PyObject* e = PyDict_Check(paths.get()) ? PyDict_GetItemWithError(paths.get(), id.get()) : nullptr;
    if (!e && PyErr_Occurred()) return nullptr;
    if (e && PyTuple_Check(e) && PyTuple_GET_SIZE(e) == 2 && PyWeakref_Check(PyTuple_GET_ITEM(e, 0)) &&
        PyWeakref_GetObject(PyTuple_GET_ITEM(e, 0)) == module) {
      path.reset(PyTuple_GET_ITEM(e, 1));
      Py_INCREF(path.get());
    } else {
      path.reset(PyObject_CallMethodObjArgs(d, M.path_of, module, nullptr));
      if (!path) return nullptr;
    }
  }
  Ref level(PyObject_GetAttr(d, M.level));
  if (!level) return nullptr;
  int api_only = PyUnicode_Check(level.get()) ? PyUnicode_Compare(level.get(), M.api) == 0 : -1;
  if (api_only < 0) { if (PyErr_Occurred()) return nullptr; return python(); }
  Ref rec;
  if (!api_only) {
    if (!PyUnicode_Check(path.get())) return python();
    Ref cls(PyObject_GetAttr((PyObject*)Py_TYPE(module), M.dunder_name));
    if (!cls) return nullptr;
    if (!PyUnicode_Check(cls.get())) return python();
    Ref base(PyUnicode_GET_LENGTH(path.get()) ? PyUnicode_FromFormat("Module.%U.%U", path.get(), cls.get())
                                              : PyUnicode_FromFormat("Module.%U", cls.get()));
    if (!base) return nullptr;
    if (!set_busy(d, true)) return nullptr;
    bool grad_on = at::GradMode::is_enabled();
    bool ok;
    {
      NoTorchFunction quiet;
      rec.reset(new_rec(d, base.get(), path.get(), Py_None, stack.get(), cls.get()));
      ok = (bool)rec;
      if (ok) {
        Ref none_on(PyList_New(0));  // _autocast_devices(): none
        ok = none_on && PyObject_SetAttr(rec.get(), M.ac, none_on.get()) == 0;
      }
      int backward = ok ? attr_true(d, M.backward) : 0;
      ok = ok && backward >= 0 && inputs_core(d, rec.get(), args, backward && grad_on);
      if (ok && PyDict_GET_SIZE(kwargs)) {
        Ref r(PyObject_CallMethodObjArgs(d, M.record_kwargs, rec.get(), kwargs,
                                         backward && grad_on ? Py_True : Py_False, nullptr));
        ok = (bool)r;
      }
      ok = ok && record_params(d, rec.get(), module);
    }
    if (!set_busy(d, false) || !ok) return nullptr;
  }
  Ref entry(PyTuple_Pack(3, module, path.get(), rec ? rec.get() : Py_None));
  if (!entry || PyList_Append(stack.get(), entry.get()) < 0) return nullptr;
  Py_RETURN_NONE;
}

// Dumper._post_hook(module, args, kwargs, output): _end for a module recorded without autocast and without lazy
// parameters; the rest in Python. Bound to the dumper.
PyObject* post_hook(PyObject* d, PyObject* const* a, Py_ssize_t n) {
  if (n != 4) { PyErr_SetString(PyExc_TypeError, "the post-hook takes 4 arguments"); return nullptr; }
  PyObject *module = a[0], *out = a[3];
  Ref stack(PyObject_GetAttr(d, M.stack));
  if (!stack) return nullptr;
  if (!PyList_Check(stack.get())) return PyObject_CallMethodObjArgs(d, M.post_hook, module, a[1], a[2], out, nullptr);
  // pop to this module (a failed inner call may have left entries behind)
  Ref rec;
  bool found = false;
  while (PyList_GET_SIZE(stack.get())) {
    Py_ssize_t last = PyList_GET_SIZE(stack.get()) - 1;
    Ref e(PyList_GET_ITEM(stack.get(), last));
    Py_INCREF(e.get());
    if (PyList_SetSlice(stack.get(), last, last + 1, nullptr) < 0) return nullptr;
    if (!PyTuple_Check(e.get()) || PyTuple_GET_SIZE(e.get()) != 3) {
      PyErr_SetString(PyExc_TypeError, "fastrec: a stack entry");
      return nullptr;
    }
    if (PyTuple_GET_ITEM(e.get(), 0) == module) {
      rec.reset(PyTuple_GET_ITEM(e.get(), 2));
      Py_INCREF(rec.get());
      found = true;
      break;
    }
  }
  if (!found || rec.get() == Py_None) Py_RETURN_NONE;
  int rec_on = attr_true(d, M.recording);
  if (rec_on <= 0) { if (rec_on < 0) return nullptr; Py_RETURN_NONE; }
  Ref lazy(PyObject_GetAttr(rec.get(), M.lazy)), ac(PyObject_GetAttr(rec.get(), M.ac));
  if (!lazy || !ac) return nullptr;
  int ac_on = PyObject_IsTrue(ac.get());
  if (ac_on < 0) return nullptr;
  if (ac_on || lazy.get() != Py_None) {  // Dumper._end: autocast off around it, lazy parameters first
    Ref r(PyObject_CallMethodObjArgs(d, M.end, rec.get(), out, nullptr));
    if (!r) return nullptr;
    Py_RETURN_NONE;
  }
  if (!set_busy(d, true)) return nullptr;
  bool ok;
  {
    bool grad_on = at::GradMode::is_enabled();
    NoTorchFunction quiet;
    ok = end_rec(d, rec.get(), out, nullptr, grad_on);
  }
  if (!set_busy(d, false) || !ok) return nullptr;
  Py_RETURN_NONE;
}

PyMethodDef hook_defs[2] = {
  {"pre_hook", (PyCFunction)(void (*)(void))pre_hook, METH_FASTCALL, "the dump's module pre-hook (fastrec.cpp)"},
  {"post_hook", (PyCFunction)(void (*)(void))post_hook, METH_FASTCALL, "the dump's module hook (fastrec.cpp)"},
};

// module_hooks(dumper): (pre, post), the module hooks bound to `dumper`
PyObject* module_hooks(PyObject*, PyObject* d) {
  if (!C.py_handler) { PyErr_SetString(PyExc_RuntimeError, "fastrec: mode_connect() first"); return nullptr; }
  Ref pre(PyCFunction_NewEx(&hook_defs[0], d, nullptr)), post(PyCFunction_NewEx(&hook_defs[1], d, nullptr));
  if (!pre || !post) return nullptr;
  return PyTuple_Pack(2, pre.get(), post.get());
}

PyMethodDef handler_def = {"__torch_function__", (PyCFunction)(void (*)(void))handler,
                           METH_FASTCALL | METH_KEYWORDS, "the dump's torch-function handler (fastrec.cpp)"};

// mode_connect(py_handler, api_cache, opforms, operator_forms, copy_ops, split_ops, sys.modules, any_autocast,
//              rec_class, skip, dumper globals)
PyObject* mode_connect(PyObject*, PyObject* args) {
  ModeConf c{};
  if (!PyArg_ParseTuple(args, "OO!O!O!O!O!O!OOOO!", &c.py_handler, &PyDict_Type, &c.api_cache, &PyDict_Type,
                        &c.opforms, &PyFrozenSet_Type, &c.operator_forms, &PyFrozenSet_Type, &c.copy_ops,
                        &PyFrozenSet_Type, &c.split_ops, &PyDict_Type, &c.modules, &c.any_autocast, &c.rec_class,
                        &c.skip, &PyDict_Type, &c.dumper_globals))
    return nullptr;
  PyObject* kernel_cache = PyDict_GetItemString(c.dumper_globals, "_kernel_cache");
  if (!kernel_cache || !PyDict_Check(kernel_cache)) {
    PyErr_SetString(PyExc_TypeError, "fastrec: dumper._kernel_cache is not a dict");
    return nullptr;
  }
  PyObject* cache = PyObject_GetAttrString(c.skip, "cache");
  if (!cache) return nullptr;
  if (!PyDict_Check(cache)) { Py_DECREF(cache); PyErr_SetString(PyExc_TypeError, "fastrec: skip.cache is not a dict"); return nullptr; }
  c.skip_cache = cache;
  if (!M.d) {
    const char* names[] = {"d", "_busy", "_recording", "_stack", "_in_optimizer", "skip_optimizer", "scope",
                           "_counts", "_recs", "name", "source", "outputs", "backward", "_end_body",
                           "_record_kwargs", "api", "forward", "input", "_DEFER_OUTPUTS", "ascendify.emulator", "kind", "module", "_paths", "_seen", "_storage",
                           "_params_seen", "level", "_record_params", "_pre_hook", "_post_hook", "lazy", "ac", "_end",
                           "_path_of", "__name__", "_parameters", "params", "_param_handles",
                           "_hook_param"};
    PyObject** slots[] = {&M.d, &M.busy, &M.recording, &M.stack, &M.in_optimizer, &M.skip_optimizer, &M.scope,
                          &M.counts, &M.recs, &M.name, &M.source, &M.outputs, &M.backward, &M.end_body,
                          &M.record_kwargs, &M.api, &M.forward, &M.input, &M.defer_outputs, &M.emulator, &M.kind, &M.module, &M.paths, &M.seen_,
                          &M.storage_, &M.params_seen, &M.level, &M.record_params, &M.pre_hook, &M.post_hook,
                          &M.lazy, &M.ac, &M.end, &M.path_of, &M.dunder_name, &M.parameters_, &M.params,
                          &M.param_handles, &M.hook_param};
    static_assert(sizeof(names) / sizeof(names[0]) == sizeof(slots) / sizeof(slots[0]));
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
      *slots[i] = PyUnicode_InternFromString(names[i]);
      if (!*slots[i]) return nullptr;
    }
  }
  PyObject** mine[] = {&C.py_handler, &C.api_cache, &C.opforms, &C.operator_forms, &C.copy_ops, &C.split_ops,
                       &C.modules, &C.any_autocast, &C.rec_class, &C.skip, &C.dumper_globals};
  PyObject* given[] = {c.py_handler, c.api_cache, c.opforms, c.operator_forms, c.copy_ops, c.split_ops,
                       c.modules, c.any_autocast, c.rec_class, c.skip, c.dumper_globals};
  for (size_t i = 0; i < sizeof(mine) / sizeof(mine[0]); i++) { Py_INCREF(given[i]); Py_XSETREF(*mine[i], given[i]); }
  Py_XSETREF(C.skip_cache, cache);
  Py_INCREF(kernel_cache);
  Py_XSETREF(C.kernel_cache, kernel_cache);
  PyObject* hcode = PyObject_GetAttrString(c.py_handler, "__code__");
  if (!hcode) return nullptr;
  Py_XSETREF(C.handler_code, hcode);
  PyObject* sa = PyDict_GetItemString(c.dumper_globals, "ScalarArg");
  if (!sa) { PyErr_SetString(PyExc_TypeError, "fastrec: dumper has no ScalarArg"); return nullptr; }
  if (!scalar_names[0]) {
    const char* sn[5] = {"NoneType", "bool", "int", "float", "str"};
    for (int i = 0; i < 5; i++) {
      scalar_names[i] = PyUnicode_InternFromString(sn[i]);
      if (!scalar_names[i]) return nullptr;
    }
  }
  Py_INCREF(sa);
  Py_XSETREF(scalar_cls, sa);
  Py_RETURN_NONE;
}

// mode_handler(mode): the handler bound to `mode`, to set as its __torch_function__
PyObject* mode_handler(PyObject*, PyObject* mode) {
  if (!C.py_handler) { PyErr_SetString(PyExc_RuntimeError, "fastrec: mode_connect() first"); return nullptr; }
  if (!stats_globals) { PyErr_SetString(PyExc_RuntimeError, "fastrec: connect() first"); return nullptr; }
  return PyCFunction_NewEx(&handler_def, mode, nullptr);
}
#endif

// init(kernel addresses (3, 0 where none), torch.Tensor, torch.nn.Parameter)
PyObject* init(PyObject*, PyObject* args) {
  unsigned long long k0, k1, k2, of = 0; PyObject *tt, *pt;
  if (!PyArg_ParseTuple(args, "(KKK)OO|K", &k0, &k1, &k2, &tt, &pt, &of)) return nullptr;
  kinds[0] = (vec_fn)(uintptr_t)k0; kinds[1] = (vec_fn)(uintptr_t)k1; kinds[2] = (vec_fn)(uintptr_t)k2;
  offsets_fn = (offs_fn)(uintptr_t)of;
  Py_INCREF(tt); Py_INCREF(pt);
  plain_types[0] = tt; plain_types[1] = pt;
  if (!cpu_name) cpu_name = PyUnicode_InternFromString("cpu");
  if (!cpu_name) return nullptr;
  Py_RETURN_NONE;
}
}  // namespace

// ---------------------------------------------------------------------------------------------- the step's entries
// entries(specs, rows, Fragment, data): the dump.json entries of a statistics step's forward nodes as JSON text
// (what msprobe_io._write_step builds from dicts: the same values, read back), each put in data[name] as
// orjson.Fragment(text); the keys are already in data, so the order stays the recs'. specs: (name, args, outputs,
// parameters or None, (kind, module_path, api, class_name, order, call_index, source, autocast)); rows: the step's
// statistics rows (lists of 14 floats, or None), or StatTable.host_rows() to read them from the table's memory.
// Returns the indices of the specs it left to the Python path: keys nested deeper than one list, a list passed by
// keyword, an output that is a dict, a value of another type.
namespace {
PyObject *s_type, *s_value;  // interned attribute names of ScalarArg

struct Parts {  // a statistics row's text for one shape: before and after "requires_grad"
  long long numel;
  std::string head, tail;
};

struct Writer {
  std::string o;
  PyObject* rows = nullptr;  // the rows as lists; or, where null, read from the table's memory:
  unsigned long long base = 0;  // its first row's address
  long long nrows = 0, rbytes = 0;
  PyObject* over = nullptr;  // row -> None or a list: the rows not in that memory
  std::vector<std::vector<Parts>> cache;  // by row: a tensor named by several calls is formatted once per shape

  void lit(const char* s) { o.append(s); }
  void integer(long long x) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, x);
    o.append(buf, (size_t)(r.ptr - buf));
  }
  bool str(PyObject* u) {
    if (!PyUnicode_Check(u)) return false;
    Py_ssize_t n;
    const char* c = PyUnicode_AsUTF8AndSize(u, &n);
    if (!c) { PyErr_Clear(); return false; }  // a lone surrogate: the Python path says what it does
    o.push_back('"');
    Py_ssize_t run = 0;  // characters copied as they are, in one append
    for (Py_ssize_t i = 0; i < n; i++) {
      unsigned char ch = (unsigned char)c[i];
      if (ch != '"' && ch != '\\' && ch >= 0x20) continue;
      o.append(c + run, (size_t)(i - run));
      run = i + 1;
      static const char* hex = "0123456789abcdef";
      switch (ch) {
        case '"': lit("\\\""); break;
        case '\\': lit("\\\\"); break;
        case '\n': lit("\\n"); break;
        case '\r': lit("\\r"); break;
        case '\t': lit("\\t"); break;
        case '\b': lit("\\b"); break;
        case '\f': lit("\\f"); break;
        default: lit("\\u00"); o.push_back(hex[ch >> 4]); o.push_back(hex[ch & 15]);
      }
    }
    o.append(c + run, (size_t)(n - run));
    o.push_back('"');
    return true;
  }
  bool str_or_null(PyObject* u) {
    if (u == Py_None) { lit("null"); return true; }
    return str(u);
  }
  // a float as JSON: the shortest text that reads back as the same double (as orjson writes it), a float literal
  // (1.0, not 1); NaN and infinities as the strings msprobe_io._json_num makes of them
  static void num(double v, std::string& out) {
    if (std::isnan(v)) { out.append("\"NaN\""); return; }
    if (std::isinf(v)) { out.append(v > 0 ? "\"Infinity\"" : "\"-Infinity\""); return; }
    char buf[40];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    size_t len = (size_t)(r.ptr - buf);
    out.append(buf, len);
    if (!memchr(buf, '.', len) && !memchr(buf, 'e', len)) out.append(".0");
  }
  bool pyint(PyObject* v) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return false; }
    integer(x);
    return true;
  }
  bool plain(PyObject* v, int depth) {  // None, bool, int, str, or a list of them (a Size, a slice's bounds)
    if (v == Py_None) lit("null");
    else if (PyBool_Check(v)) lit(v == Py_True ? "true" : "false");
    else if (PyLong_Check(v)) return pyint(v);
    else if (PyUnicode_Check(v)) return str(v);
    else if (PyList_Check(v) && depth < 4) {
      o.push_back('[');
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
        if (i) o.push_back(',');
        if (!plain(PyList_GET_ITEM(v, i), depth + 1)) return false;
      }
      o.push_back(']');
    } else return false;  // a float inside a list (orjson would write NaN there as null), another type
    return true;
  }
  bool scalar(PyObject* sa) {  // a ScalarArg: {"type": ..., "value": ...}, or null for None
    PyObject* type = PyObject_GetAttr(sa, s_type);
    if (!type) { PyErr_Clear(); return false; }
    if (!PyUnicode_Check(type)) { Py_DECREF(type); return false; }
    if (PyUnicode_CompareWithASCIIString(type, "NoneType") == 0) { Py_DECREF(type); lit("null"); return true; }
    PyObject* v = PyObject_GetAttr(sa, s_value);
    if (!v) { PyErr_Clear(); Py_DECREF(type); return false; }
    lit("{\"type\":");
    bool ok = str(type);
    lit(",\"value\":");
    if (ok) {
      if (PyFloat_Check(v)) num(PyFloat_AS_DOUBLE(v), o);
      else ok = plain(v, 0);
    }
    o.push_back('}');
    Py_DECREF(type);
    Py_DECREF(v);
    return ok;
  }
  const Parts* parts(long long row, long long numel) {
    if (row >= 0 && row < (long long)cache.size())
      for (const Parts& p : cache[(size_t)row]) if (p.numel == numel) return &p;
    Parts p{numel, {}, {}};
    PyObject* r = nullptr;
    double v[14];
    bool mem = false;  // the row read from the table's memory
    if (rows) {
      if (row >= 0 && row < PyList_GET_SIZE(rows)) r = PyList_GET_ITEM(rows, row);
    } else if (row >= 0 && row < nrows) {
      PyObject* key = PyLong_FromLongLong(row);
      if (!key) { PyErr_Clear(); return nullptr; }
      r = PyDict_GetItemWithError(over, key);  // borrowed: a row without statistics (None) or torch's (a list)
      Py_DECREF(key);
      if (!r) {
        if (PyErr_Occurred()) { PyErr_Clear(); return nullptr; }
        const float* f = (const float*)(uintptr_t)(base + (unsigned long long)row * (unsigned long long)rbytes);
        for (int j = 0; j < 14; j++) v[j] = (double)f[j];
        mem = true;
      }
    }
    if (!mem && (r == nullptr || r == Py_None)) {
      p.head = "\"Max\":null,\"Min\":null,\"Mean\":null,\"Norm\":null,";
      p.tail = "\"fingerprint\":[],\"nan_count\":0,\"inf_count\":0,";
    } else {
      if (!mem) {
        if (!PyList_Check(r) || PyList_GET_SIZE(r) != 14) return nullptr;
        for (int j = 0; j < 14; j++) {
          PyObject* x = PyList_GET_ITEM(r, j);
          if (!PyFloat_Check(x)) return nullptr;
          v[j] = PyFloat_AS_DOUBLE(x);
        }
      }
      std::string& a = p.head;
      a.append("\"Max\":"); num(v[1], a);
      a.append(",\"Min\":"); num(v[0], a);
      a.append(",\"Mean\":"); num(v[2] / (double)numel, a);  // the sum over math.prod(shape), as in Python
      a.append(",\"Norm\":"); num(v[3], a);
      a.push_back(',');
      std::string& b = p.tail;
      b.append("\"fingerprint\":[");
      for (int j = 6; j < 14; j++) { if (j > 6) b.push_back(','); num(v[j], b); }
      char buf[24];
      b.append("],\"nan_count\":");
      b.append(buf, (size_t)(std::to_chars(buf, buf + sizeof buf, (long long)v[4]).ptr - buf));
      b.append(",\"inf_count\":");
      b.append(buf, (size_t)(std::to_chars(buf, buf + sizeof buf, (long long)v[5]).ptr - buf));
      b.push_back(',');
    }
    if (row < 0 || row >= (long long)cache.size()) { scratch = std::move(p); return &scratch; }
    cache[(size_t)row].push_back(std::move(p));
    return &cache[(size_t)row].back();
  }
  Parts scratch;
  bool tensor(PyObject* meta, PyObject* idx) {  // meta: (dtype, shape, requires_grad, device)
    if (!PyTuple_Check(meta) || PyTuple_GET_SIZE(meta) != 4) return false;
    PyObject* shape = PyTuple_GET_ITEM(meta, 1);
    PyObject* rg = PyTuple_GET_ITEM(meta, 2);
    if (!PyTuple_Check(shape) || (rg != Py_True && rg != Py_False)) return false;
    lit("{\"type\":\"torch.Tensor\",\"dtype\":");
    if (!str(PyTuple_GET_ITEM(meta, 0))) return false;
    lit(",\"shape\":[");
    long long numel = 1;
    for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape); d++) {
      if (d) o.push_back(',');
      PyObject* v = PyTuple_GET_ITEM(shape, d);
      int overflow = 0;
      long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
      if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return false; }
      integer(x);
      numel *= x;
    }
    lit("],");
    long long row = -1;
    if (idx != Py_None) {
      row = PyLong_AsLongLong(idx);
      if (row == -1 && PyErr_Occurred()) { PyErr_Clear(); return false; }
    }
    const Parts* p = parts(row, numel);
    if (!p) return false;
    o.append(p->head);
    lit(rg == Py_True ? "\"requires_grad\":true," : "\"requires_grad\":false,");
    o.append(p->tail);
    lit("\"device\":");
    if (!str(PyTuple_GET_ITEM(meta, 3))) return false;
    o.push_back('}');
    return true;
  }
  bool value(PyObject* it) {  // an item (key, meta, idx): a tensor's entry, or a ScalarArg's
    PyObject* meta = PyTuple_GET_ITEM(it, 1);
    if (PyTuple_Check(meta)) return tensor(meta, PyTuple_GET_ITEM(it, 2));
    return scalar(meta);
  }
  // A list of positional items as _nest rebuilds it, where it is well formed: keys "0", "1", ... in order, a list
  // argument as "i.0", "i.1", ... (one level). Keyword items (keys not starting with a digit) are skipped here.
  bool positional(PyObject* lst) {
    o.push_back('[');
    long long top = 0, group = -1, next = 0;  // next top-level index; the open group's index and next member
    bool first = true;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lst); i++) {
      PyObject* it = PyList_GET_ITEM(lst, i);
      if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 3 || !PyUnicode_Check(PyTuple_GET_ITEM(it, 0))) return false;
      Py_ssize_t n;
      const char* k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(it, 0), &n);
      if (!k) { PyErr_Clear(); return false; }
      if (n && (unsigned char)k[0] >= 0x80) return false;  // str.isdigit() decides: the Python path
      if (n == 0 || k[0] < '0' || k[0] > '9') continue;  // a keyword argument
      long long a = 0, b = -1;
      const char* e = k + n;
      auto r = std::from_chars(k, e, a);
      if (r.ec != std::errc()) return false;
      if (r.ptr != e) {
        if (*r.ptr != '.') return false;
        auto r2 = std::from_chars(r.ptr + 1, e, b);
        if (r2.ec != std::errc() || r2.ptr != e) return false;
      }
      if (b < 0) {  // "a"
        if (group >= 0) { o.push_back(']'); group = -1; top++; }
        if (a != top) return false;
        if (!first) o.push_back(',');
        if (!value(it)) return false;
        top++;
      } else if (group == a && b == next) {  // the open list goes on
        o.push_back(',');
        if (!value(it)) return false;
        next++;
      } else {  // "a.0" opens a list argument
        if (group >= 0) { o.push_back(']'); group = -1; top++; }
        if (a != top || b != 0) return false;
        if (!first) o.push_back(',');
        o.push_back('[');
        if (!value(it)) return false;
        group = a;
        next = 1;
      }
      first = false;
    }
    if (group >= 0) o.push_back(']');
    o.push_back(']');
    return true;
  }
  bool keywords(PyObject* lst) {  // {"name": value} of the keyword items, in order; a list by keyword: not here
    o.push_back('{');
    bool first = true;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lst); i++) {
      PyObject* it = PyList_GET_ITEM(lst, i);
      PyObject* key = PyTuple_GET_ITEM(it, 0);  // checked by positional()
      Py_ssize_t n;
      const char* k = PyUnicode_AsUTF8AndSize(key, &n);
      if (!k) { PyErr_Clear(); return false; }
      if (n && k[0] >= '0' && k[0] <= '9') continue;
      if ((n && (unsigned char)k[0] >= 0x80) || memchr(k, '.', (size_t)n)) return false;
      if (!first) o.push_back(',');
      first = false;
      if (!str(key)) return false;
      o.push_back(':');
      if (!value(it)) return false;
    }
    o.push_back('}');
    return true;
  }
  bool entry(PyObject* spec) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5) return false;
    PyObject *args = PyTuple_GET_ITEM(spec, 1), *outs = PyTuple_GET_ITEM(spec, 2), *params = PyTuple_GET_ITEM(spec, 3);
    PyObject* asc = PyTuple_GET_ITEM(spec, 4);
    if (!PyList_Check(args) || !PyList_Check(outs) || !PyTuple_Check(asc) || PyTuple_GET_SIZE(asc) != 8) return false;
    o.clear();
    lit("{\"input_args\":");
    if (!positional(args)) return false;
    lit(",\"input_kwargs\":");
    if (!keywords(args)) return false;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(outs); i++) {  // a dict's outputs (keyed): the Python path
      PyObject* it = PyList_GET_ITEM(outs, i);
      if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 3 || !PyUnicode_Check(PyTuple_GET_ITEM(it, 0))) return false;
      Py_ssize_t n;
      const char* k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(it, 0), &n);
      if (!k) { PyErr_Clear(); return false; }
      if (n == 0 || k[0] < '0' || k[0] > '9') return false;  // also a non-ASCII first character
    }
    lit(",\"output\":");
    if (!positional(outs)) return false;
    if (params != Py_None) {
      if (!PyDict_Check(params)) return false;
      lit(",\"parameters\":{");
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      bool first = true;
      while (PyDict_Next(params, &pos, &k, &v)) {
        if (!first) o.push_back(',');
        first = false;
        if (!str(k) || !PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 2) return false;
        o.push_back(':');
        if (!tensor(PyTuple_GET_ITEM(v, 0), PyTuple_GET_ITEM(v, 1))) return false;
      }
      o.push_back('}');
    }
    static const char* names[8] = {"{\"kind\":", ",\"module_path\":", ",\"api\":", ",\"class_name\":", ",\"order\":",
                                   ",\"call_index\":", ",\"source\":", ",\"autocast\":"};
    lit(",\"ascendify\":");
    for (int j = 0; j < 8; j++) {
      lit(names[j]);
      PyObject* v = PyTuple_GET_ITEM(asc, j);
      if (j == 4 || j == 5) {
        if (!PyLong_Check(v) || !pyint(v)) return false;
      } else if (!str_or_null(v)) return false;
    }
    lit("}}");
    return true;
  }
};

PyObject* entries(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (n != 4) { PyErr_SetString(PyExc_TypeError, "entries takes 4 arguments"); return nullptr; }
  PyObject *specs = a[0], *rows = a[1], *fragment = a[2], *data = a[3];
  unsigned long long base = 0;
  long long nrows = 0, rbytes = 0;
  PyObject* over = nullptr;
  if (PyTuple_Check(rows)) {  // (address, rows, bytes a row, {row: None or list}): StatTable.host_rows
    if (!PyArg_ParseTuple(rows, "KLLO!", &base, &nrows, &rbytes, &PyDict_Type, &over)) return nullptr;
    if (rbytes < 14 * (long long)sizeof(float) || nrows < 0 || (nrows && !base)) {
      PyErr_SetString(PyExc_ValueError, "entries: a table of rows shorter than 14 floats");
      return nullptr;
    }
    rows = nullptr;
  } else if (!PyList_Check(rows)) {
    PyErr_SetString(PyExc_TypeError, "entries: rows must be a list or StatTable.host_rows()");
    return nullptr;
  }
  if (!PyList_Check(specs) || !PyDict_Check(data)) {
    PyErr_SetString(PyExc_TypeError, "entries(list, rows, Fragment, dict)");
    return nullptr;
  }
  if (!s_type) {
    s_type = PyUnicode_InternFromString("type");
    s_value = PyUnicode_InternFromString("value");
    if (!s_type || !s_value) return nullptr;
  }
  PyObject* missed = PyList_New(0);
  if (!missed) return nullptr;
  Writer w;
  w.rows = rows;
  w.base = base;
  w.nrows = nrows;
  w.rbytes = rbytes;
  w.over = over;
  w.cache.resize((size_t)(rows ? PyList_GET_SIZE(rows) : nrows));
  w.o.reserve(8192);
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(specs); i++) {
    PyObject* spec = PyList_GET_ITEM(specs, i);
    bool ok = w.entry(spec);
    if (PyErr_Occurred()) { Py_DECREF(missed); return nullptr; }
    PyObject* res = nullptr;
    if (ok) {
      PyObject* b = PyBytes_FromStringAndSize(w.o.data(), (Py_ssize_t)w.o.size());
      PyObject* f = b ? PyObject_CallOneArg(fragment, b) : nullptr;
      Py_XDECREF(b);
      if (f && PyDict_SetItem(data, PyTuple_GET_ITEM(spec, 0), f) == 0) res = f;
      else Py_XDECREF(f);
    } else {
      res = PyLong_FromSsize_t(i);
      if (res && PyList_Append(missed, res) < 0) Py_CLEAR(res);
    }
    if (!res) { Py_DECREF(missed); return nullptr; }
    Py_DECREF(res);
  }
  return missed;
}
}  // namespace

namespace {
PyMethodDef methods[] = {
  {"probe", (PyCFunction)probe, METH_O, "a tensor's metadata, version and memory key"},
  {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL, "a contiguous tensor's statistics row"},
  {"init", (PyCFunction)init, METH_VARARGS, "kernels and tensor types"},
  {"entries", (PyCFunction)(void (*)(void))entries, METH_FASTCALL, "the step's common dump.json entries"},
  {"connect", (PyCFunction)connect, METH_VARARGS, "the statistics table's module, fill, constants"},
  {"item", (PyCFunction)(void (*)(void))item, METH_FASTCALL, "the recording of a tensor"},
  {"inputs", (PyCFunction)(void (*)(void))inputs, METH_FASTCALL, "the recording of a call's positional inputs"},
#ifdef FASTREC_MODE
  {"mode_connect", (PyCFunction)mode_connect, METH_VARARGS, "the dumper's tables for the mode's handler"},
  {"mode_handler", (PyCFunction)mode_handler, METH_O, "the mode's handler, bound to a mode"},
  {"module_hooks", (PyCFunction)module_hooks, METH_O, "the module hooks, bound to a dumper"},
#endif
  {nullptr, nullptr, 0, nullptr},
};
}  // namespace

// MODULE_NAME: the module's name, given by the build (core/cxx.py), which keys it by source, torch and Python
#ifndef MODULE_NAME
#define MODULE_NAME ascendify_fastrec
#endif
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define STR2(a) #a
#define STR(a) STR2(a)
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, STR(MODULE_NAME), nullptr, -1, methods};
PyMODINIT_FUNC CAT(PyInit_, MODULE_NAME)(void) { return PyModule_Create(&mod); }
