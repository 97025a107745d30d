// The emulated npu device's hot kernels in C++: zero-copy CPU aliases, the CPU kernel, npu results.
//
// One boxed kernel (`Fast`) serves every op the Python side hands it (ascendify/emulator/ops/cfast.py). It
// does what the Python fast path does (ops/fastpath.py, ops/kernels.py `_run_fast`), without a Python frame:
//   1. every npu tensor argument (also inside tensor lists) becomes a CPU tensor over the same memory;
//   2. the CPU kernel runs (a redispatch to the CPU key: autograd and autocast were handled above);
//   3. written arguments are returned as the original npu tensors, fresh results become npu tensors over the
//      CPU result's memory, counted as device memory until they die.
// View ops run the CPU view kernel on the npu tensors themselves (metadata only).
// Anything unusual (a non-scalar CPU tensor mixed in, two devices, a lazy conj/neg view, a sparse layout, no
// npu argument, or a setting that needs per-op checks in Python) goes to the op's Python kernel, unchanged, so
// errors and reports are those of the Python path. Float64 results and going beyond the emulated memory
// capacity call back into Python (the fidelity report, torch.OutOfMemoryError).

#include <torch/extension.h>
#include <torch/library.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int kDevices = 64;
// Device memory counters, shared with Python (ascendify.emulator.memory reads and writes them through
// ctypes at these addresses). Static: deleters may run at interpreter exit, after Python objects are gone.
int64_t g_allocated[kDevices];
int64_t g_peak[kDevices];
int64_t g_allocs[kDevices];
int64_t g_frees[kDevices];
int64_t g_limit[kDevices];  // capacity in bytes per device; beyond it Python raises the OOM error

std::atomic<int> g_slow{0};    // 1: every call takes the Python kernels (fp16 overflow check, saturation)
std::atomic<int> g_single{0};  // settings.single_device: results are npu:0
PyObject* g_events = nullptr;  // Python callable(kind, op_name, value) for rare events; never released

struct Ctx {
  c10::Storage keep;  // the storage aliased (kept alive as long as the alias lives)
  int index;
  int64_t counted;  // bytes counted as device memory (0: an alias, not counted)
};

// Raise device `index`'s peak to `a` if above (a compare-and-swap loop: threads may count at once).
inline void raise_peak(int index, int64_t a) {
  int64_t p = __atomic_load_n(&g_peak[index], __ATOMIC_RELAXED);
  while (a > p && !__atomic_compare_exchange_n(&g_peak[index], &p, a, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

// Count `nbytes` (negative: freed) and `allocs`/`frees` on device `index`, atomically: the kernels run without the
// GIL, and Python counts into the same arrays (account()). Returns the bytes now allocated there.
inline int64_t count(int index, int64_t nbytes, int64_t allocs, int64_t frees) {
  if (allocs) __atomic_add_fetch(&g_allocs[index], allocs, __ATOMIC_RELAXED);
  if (frees) __atomic_add_fetch(&g_frees[index], frees, __ATOMIC_RELAXED);
  const int64_t a = __atomic_add_fetch(&g_allocated[index], nbytes, __ATOMIC_RELAXED);
  if (nbytes > 0) raise_peak(index, a);
  return a;
}

void release(void* p) {
  auto* c = static_cast<Ctx*>(p);
  if (c->counted > 0) count(c->index, -c->counted, 0, 1);
  delete c;
}

// A storage over `st`'s memory tagged `device`, keeping `st` alive (and counting `counted` bytes until it dies).
c10::Storage rewrap_storage(const c10::Storage& st, c10::Device device, int index, int64_t counted) {
  auto* ctx = new Ctx{st, index, counted};
  c10::DataPtr dp(st.mutable_data(), ctx, &release, device);
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), st.nbytes(),
                                                            std::move(dp), nullptr, false));
}

// A tensor over `storage` with `src`'s sizes, strides, offset and dtype.
at::Tensor over(c10::Storage storage, const at::Tensor& src, c10::DispatchKey key) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), src.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(src.sizes(), src.strides(), src.storage_offset());
  return t;
}

// The wrapped storages of one call, one per storage wrapped: tensors that share memory before (arguments that
// are views of one npu tensor, results over one CPU storage) share one storage after, so that the CPU kernels'
// memory-overlap checks (Storage::is_alias_of) see it, and memory is counted once, until the last one dies.
struct Wrapped {
  std::vector<std::pair<c10::Storage, c10::Storage>> v;  // (storage wrapped, its wrapper)
  const c10::Storage* find(const c10::Storage& st) const {
    for (const auto& p : v) if (p.first.unsafeGetStorageImpl() == st.unsafeGetStorageImpl()) return &p.second;
    return nullptr;
  }
  // A CPU alias of npu tensor `t`.
  at::Tensor cpu(const at::Tensor& t) {
    const c10::Storage* s = find(t.storage());
    if (s == nullptr) {
      v.emplace_back(t.storage(), rewrap_storage(t.storage(), c10::Device(c10::kCPU), 0, 0));
      s = &v.back().second;
    }
    return over(*s, t, c10::DispatchKey::CPU);
  }
};

// Python objects are made and dropped only while the GIL is held (the kernels run without it).
void event(const char* kind, const std::string& name, const std::string& text, int64_t a = 0, int64_t b = 0) {
  py::gil_scoped_acquire gil;
  if (g_events == nullptr) return;
  if (text.empty()) {
    py::reinterpret_borrow<py::object>(g_events)(kind, name, py::make_tuple(a, b));
  } else {
    py::reinterpret_borrow<py::object>(g_events)(kind, name, py::str(text));
  }
}

enum Check { OK = 0, SLOW = 1 };

// Where argument tensor `t` allows the fast path; updates the device index seen.
inline Check check(const at::Tensor& t, int& index) {
  if (!t.defined()) return OK;
  const auto dt = t.device().type();
  if (dt == c10::DeviceType::PrivateUse1) {
    if (t.layout() != c10::kStrided || t.is_conj() || t.is_neg()) return SLOW;
    const int d = t.device().index();
    if (index >= 0 && d != index) return SLOW;  // the Python kernel raises the two-devices error
    index = d;
    return OK;
  }
  if (dt == c10::DeviceType::CPU && t.dim() == 0) return OK;  // a scalar (wrapped number)
  return SLOW;
}

struct Fast final : c10::OperatorKernel {
  std::string name;
  bool view = false;
  std::optional<c10::OperatorHandle> target;  // run this CPU op instead (convolution for convolution_overrideable)
  bool bias_sizes = false;  // convolution_backward_overrideable -> convolution_backward: insert its bias_sizes
  std::vector<int> returns_arg;  // per return: the argument it writes and returns, or -1 (a fresh result)
  PyObject* python = nullptr;     // the op's Python kernel (never released: it lives as long as the process)
  int64_t calls = 0;

  // The op's Python kernel on the arguments (positional, keyword-only ones by name unless at their default),
  // its result pushed back as the schema's returns.
  void slow(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t n) {
    py::gil_scoped_acquire gil;
    const auto& schema = op.schema();
    const size_t base = stack->size() - n;
    py::list args;
    py::dict kwargs;
    for (size_t i = 0; i < n; i++) {
      const auto& arg = schema.arguments()[i];
      const c10::IValue& v = (*stack)[base + i];
      if (arg.kwarg_only()) {
        if (arg.default_value() && *arg.default_value() == v) continue;
        kwargs[py::str(arg.name())] = torch::jit::toPyObject(v);
      } else {
        args.append(torch::jit::toPyObject(v));
      }
    }
    torch::jit::drop(*stack, n);
    py::object out = py::reinterpret_borrow<py::object>(python)(*py::tuple(args), **kwargs);
    const auto& rets = schema.returns();
    if (rets.size() == 1) {
      stack->push_back(torch::jit::toIValue(out, rets[0].type()));
    } else if (rets.size() > 1) {
      // a tuple from every kernel today; any sequence of the right length is taken, anything else refused
      TORCH_CHECK(PySequence_Check(out.ptr()) && static_cast<size_t>(py::len(out)) == rets.size(),
                  "npu kernel for ", name, ": expected ", rets.size(), " results from its Python kernel");
      auto seq = py::reinterpret_borrow<py::sequence>(out);
      for (size_t j = 0; j < rets.size(); j++) stack->push_back(torch::jit::toIValue(seq[j], rets[j].type()));
    }
  }

  // The npu tensor over CPU result `r`'s memory: one npu storage per CPU storage among the results (counted
  // once, as device memory, where it is fresh memory).
  at::Tensor adopt(const at::Tensor& r, int index, Wrapped& results) {
    const auto st = r.scalar_type();
    if (st == at::kDouble || st == at::kComplexDouble) {
      event("float64", name, c10::toString(st));
    }
    const c10::Storage& s = r.storage();
    if (const c10::Storage* done = results.find(s)) return over(*done, r, c10::DispatchKey::PrivateUse1);
    int64_t counted = 0;
    if (s.resizable() && s.nbytes() > 0) {  // fresh CPU allocator memory (aliases are not resizable)
      counted = static_cast<int64_t>(s.nbytes());
      if (g_allocated[index] + counted > g_limit[index]) event("oom", name, "", counted, index);
      count(index, counted, 1, 0);
    }
    const c10::Device device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(index));
    results.v.emplace_back(s, rewrap_storage(s, device, index, counted));
    return over(results.v.back().second, r, c10::DispatchKey::PrivateUse1);
  }

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    if (g_slow.load(std::memory_order_relaxed)) return slow(op, stack, n);
    const size_t base = stack->size() - n;
    int index = -1;
    for (size_t i = base; i < stack->size(); i++) {
      const c10::IValue& v = (*stack)[i];
      if (v.isTensor()) {
        if (check(v.toTensor(), index) == SLOW) return slow(op, stack, n);
      } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList()) {
          if (check(t, index) == SLOW) return slow(op, stack, n);
        }
      } else if (v.isList()) {
        for (const c10::IValue& e : v.toListRef()) {
          if (e.isTensor() && check(e.toTensor(), index) == SLOW) return slow(op, stack, n);
        }
      }
    }
    if (index < 0) return slow(op, stack, n);
    calls++;
    if (view) {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
      return;
    }
    Wrapped args;  // one CPU alias storage per npu storage among the arguments
    std::vector<c10::IValue> written;
    written.reserve(returns_arg.size());
    for (int a : returns_arg) written.push_back(a >= 0 ? (*stack)[base + a] : c10::IValue());
    for (size_t i = base; i < stack->size(); i++) {
      c10::IValue& v = (*stack)[i];
      if (v.isTensor()) {
        const at::Tensor& t = v.toTensor();
        if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1) v = args.cpu(t);
      } else if (v.isTensorList()) {
        c10::List<at::Tensor> out;
        for (const at::Tensor& t : v.toTensorList()) {
          out.push_back(t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 ? args.cpu(t) : t);
        }
        v = out;
      } else if (v.isList()) {
        auto list = v.toList();
        bool any = false;
        for (const c10::IValue& e : list) any = any || e.isTensor();
        if (any) {
          c10::List<std::optional<at::Tensor>> out;
          for (const c10::IValue& e : list) {
            if (e.isTensor() && e.toTensor().device().type() == c10::DeviceType::PrivateUse1) out.push_back(args.cpu(e.toTensor()));
            else out.push_back(e.isTensor() ? std::optional<at::Tensor>(e.toTensor()) : std::nullopt);
          }
          v = out;
        }
      }
    }
    if (target) {
      if (bias_sizes) {  // (grad_output, input, weight, [bias_sizes], stride, padding, dilation, transposed, ...)
        const at::Tensor& w = (*stack)[base + 2].toTensor();
        const bool transposed = (*stack)[base + 6].toBool();
        const int64_t groups = (*stack)[base + 8].toInt();
        std::vector<int64_t> sizes{transposed ? w.size(1) * groups : w.size(0)};
        stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(base + 3), c10::IValue(sizes));
      }
      target->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    } else {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    }
    const int dev = g_single.load(std::memory_order_relaxed) ? 0 : index;
    const size_t m = returns_arg.size();
    Wrapped results;
    for (size_t j = 0; j < m; j++) {
      c10::IValue& r = (*stack)[stack->size() - m + j];
      if (returns_arg[j] >= 0) {
        r = written[j];
      } else if (r.isTensor()) {
        const at::Tensor& t = r.toTensor();
        if (t.defined()) r = adopt(t, dev, results);
      } else if (r.isTensorList()) {
        c10::List<at::Tensor> out;
        for (const at::Tensor& t : r.toTensorList()) out.push_back(t.defined() ? adopt(t, dev, results) : t);
        r = out;
      }
    }
  }
};

// The npu device guard, as PyTorch's Python one (torch/csrc/acc: one device seen by the guard, default streams,
// no events) but without calling into Python for the device type: autograd nodes, DeviceGuards and stream
// guards ask for it many times per op.
struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device) const override { return getDevice(); }
  c10::Device getDevice() const override { return c10::Device(c10::DeviceType::PrivateUse1, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, 0));
  }
  c10::Stream getNewStream(c10::Device, int) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, 0));
  }
  c10::Stream exchangeStream(c10::Stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, 0));
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};

// Replace the registered (Python) PrivateUse1 guard with the C++ one; it stays registered for the process.
void install_guard() {
  static Guard guard;
  c10::impl::DeviceGuardImplRegistrar(c10::DeviceType::PrivateUse1, &guard);
}

// Pinned (page-locked) host memory, as torch_npu's host allocator gives it: `torch.empty(..., pin_memory=True)`,
// `Tensor.pin_memory()`, DDP's pinned copy of its used-parameter map (find_unused_parameters=True). The emulated
// device is host memory, so the blocks are ordinary CPU memory; they are remembered, so that `is_pinned()`
// answers True for them (and for views into them) and False for every other CPU tensor, as on an NPU.
std::mutex g_pinned_mu;
std::map<uintptr_t, size_t> g_pinned;  // block start -> size

void pinned_free(void* p) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    g_pinned.erase(reinterpret_cast<uintptr_t>(p));
  }
  c10::free_cpu(p);
}

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    void* p = n ? c10::alloc_cpu(n) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> lock(g_pinned_mu);
      g_pinned[reinterpret_cast<uintptr_t>(p)] = n;
    }
    return {p, p, p ? &pinned_free : nullptr, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &pinned_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

bool pinned_ptr(const void* data) {
  const auto a = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(g_pinned_mu);
  auto it = g_pinned.upper_bound(a);
  if (it == g_pinned.begin()) return false;
  --it;
  return a < it->first + it->second || (a == it->first);
}

// The PrivateUse1 hooks: the Python ones (backend.py) answer is_available / has_primary_context / is_built;
// pinned host memory is served here (Python hooks cannot provide an allocator). Registered once per process,
// instead of the Python hooks.
struct Hooks final : at::PrivateUse1HooksInterface {
  py::object python;
  explicit Hooks(py::object p) : python(std::move(p)) {}
  bool ask(const char* name) const {
    py::gil_scoped_acquire gil;
    return python.attr(name)().cast<bool>();
  }
  bool isBuilt() const override { return ask("is_built"); }
  bool isAvailable() const override { return ask("is_available"); }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    py::gil_scoped_acquire gil;
    return python.attr("has_primary_context")(index).cast<bool>();
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    static PinnedAllocator allocator;
    return &allocator;
  }
  bool isPinnedPtr(const void* data) const override { return pinned_ptr(data); }
};

void register_hooks(py::object python) {
  static Hooks* hooks = new Hooks(std::move(python));  // lives as long as the process, as torch expects
  at::RegisterPrivateUse1HooksInterface(hooks);
}

size_t pinned_blocks() {
  std::lock_guard<std::mutex> lock(g_pinned_mu);
  return g_pinned.size();
}

std::vector<std::unique_ptr<torch::Library>> g_libs;
std::vector<Fast*> g_kernels;

// Register the fast kernel for aten op `name` ("add.Tensor") on PrivateUse1. `returns_arg`: per return, the
// argument index it writes (-1: fresh). `python`: the op's Python kernel, taken when the fast path cannot serve.
int64_t register_op(const std::string& name, bool view, std::vector<int64_t> returns_arg, py::object python,
                    const std::string& target) {
  auto k = std::make_unique<Fast>();
  k->name = name;
  k->view = view;
  if (!target.empty()) {
    auto dot = target.find('.');
    auto handle = c10::Dispatcher::singleton().findSchema(
        {"aten::" + target.substr(0, dot), dot == std::string::npos ? "" : target.substr(dot + 1)});
    TORCH_CHECK(handle.has_value(), "ascendify cfast: no op aten::", target);
    k->target = *handle;
    k->bias_sizes = target == "convolution_backward";  // the overrideable op has no bias_sizes argument
  }
  for (auto a : returns_arg) k->returns_arg.push_back(static_cast<int>(a));
  Fast* kernel = k.get();  // owned by the registration below; listed only once that succeeded
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                              "ascendify/emulator/ops/cfast.cpp", 0);
  lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(k)));
  kernel->python = python.release().ptr();
  g_kernels.push_back(kernel);
  g_libs.push_back(std::move(lib));
  return static_cast<int64_t>(g_kernels.size()) - 1;
}

py::dict counts() {
  py::dict d;
  for (auto* k : g_kernels) {
    if (k->calls) d[py::str(k->name)] = py::int_(k->calls);
  }
  return d;
}

void reset_counts() {
  for (auto* k : g_kernels) k->calls = 0;
}

void set_events(py::object fn) {
  Py_XDECREF(g_events);
  g_events = fn.release().ptr();
}

void set_mode(bool slow, bool single) {
  g_slow.store(slow ? 1 : 0);
  g_single.store(single ? 1 : 0);
}

// The Python side's counting (memory.py: tensors adopted by the Python kernels), with the same atomic updates as
// the kernels' (which run without the GIL, so a read-modify-write in Python could lose theirs). Returns the
// bytes now allocated on device `index`.
int64_t account(int index, int64_t nbytes, int64_t allocs, int64_t frees) {
  TORCH_CHECK(index >= 0 && index < kDevices, "ascendify cfast: no device ", index);
  return count(index, nbytes, allocs, frees);
}

py::dict addresses() {
  py::dict d;
  d["allocated"] = reinterpret_cast<uintptr_t>(g_allocated);
  d["peak"] = reinterpret_cast<uintptr_t>(g_peak);
  d["num_allocs"] = reinterpret_cast<uintptr_t>(g_allocs);
  d["num_frees"] = reinterpret_cast<uintptr_t>(g_frees);
  d["limit"] = reinterpret_cast<uintptr_t>(g_limit);
  d["devices"] = kDevices;
  return d;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("register_op", &register_op, py::arg("name"), py::arg("view"), py::arg("returns_arg"), py::arg("python"),
        py::arg("target") = "");
  m.def("install_guard", &install_guard);
  m.def("counts", &counts);
  m.def("reset_counts", &reset_counts);
  m.def("set_events", &set_events);
  m.def("set_mode", &set_mode);
  m.def("addresses", &addresses);
  m.def("account", &account);
  m.def("register_hooks", &register_hooks);
  m.def("pinned_blocks", &pinned_blocks);
}
