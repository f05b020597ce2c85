// hora._core: the Python binding of the engine (pybind11). It knows nothing of PyTorch: tensors
// cross as data pointers (ints), dtypes and shapes, so any PyTorch version works without a
// rebuild. Outputs whose shape is known only after negotiation (allgather, alltoall,
// reducescatter) are allocated here and handed to Python as a numpy array that owns them, which
// torch.from_numpy wraps without a copy.
//
// One Engine per process (hora.torch.init / shutdown). Waits release the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <optional>

#include "hora/communicator.h"
#include "hora/elastic.h"
#include "hora/engine.h"
#include "hora/engine_access.h"
#include "hora/errors.h"

namespace py = pybind11;

namespace {

std::mutex engine_mutex;  // serializes init and shutdown
// The engine. Python reaches it under the GIL; op libraries (engine_access.h) from their own
// threads without it, so they take a reference under engine_pointer_mutex, which shutdown's
// reset also takes: an engine in use by such a thread is destroyed when that thread lets go.
std::mutex engine_pointer_mutex;
std::shared_ptr<hora::Engine> engine;

std::shared_ptr<hora::Engine> currentEngine() {
  std::lock_guard lock(engine_pointer_mutex);
  return engine;
}

void setEngine(std::shared_ptr<hora::Engine> e) {
  std::lock_guard lock(engine_pointer_mutex);
  engine = std::move(e);
}

constexpr const char* kNotInitialized = "hora has not been initialized; call hvd.init()";

hora::Engine& theEngine() {
  if (!engine) throw hora::InvalidArgumentError(kNotInitialized);
  return *engine;
}

// A request in flight, as Python sees it: the engine's handle and, for collectives whose output
// the engine allocates, that output's bytes.
class PyHandle {
 public:
  PyHandle(hora::Handle h, std::shared_ptr<std::vector<std::byte>> out)
      : handle_(std::move(h)), output_(std::move(out)) {}
  bool poll() const { return handle_.poll(); }
  void wait(double timeout_seconds) const {
    py::gil_scoped_release release;
    handle_.wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  }
  std::vector<int64_t> outputShape() const { return handle_.outputShape(); }
  // The allocated output as a flat uint8 array that keeps the bytes alive.
  py::array_t<uint8_t> output() const {
    if (!output_) throw hora::InvalidArgumentError("this collective writes into the tensor it was given");
    auto keep = new std::shared_ptr<std::vector<std::byte>>(output_);
    py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<std::vector<std::byte>>*>(p); });
    return py::array_t<uint8_t>({static_cast<py::ssize_t>(output_->size())}, {1},
                                reinterpret_cast<uint8_t*>(output_->data()), owner);
  }

 private:
  hora::Handle handle_;
  std::shared_ptr<std::vector<std::byte>> output_;
};

PyHandle enqueue(const std::string& name, int op, int dtype, std::vector<int64_t> shape, uintptr_t input,
                 uintptr_t output, int reduce_op, double prescale, double postscale, int root,
                 std::vector<int64_t> splits, int process_set) {
  hora::Request r;
  r.name = name;
  r.op = static_cast<hora::CollectiveKind>(op);
  r.type = static_cast<hora::DataType>(dtype);
  r.shape = std::move(shape);
  r.input = reinterpret_cast<const void*>(input);
  r.output = reinterpret_cast<void*>(output);
  r.reduce = {static_cast<hora::ReduceOp>(reduce_op), prescale, postscale};
  r.root = root;
  r.splits = std::move(splits);
  r.process_set = process_set;
  std::shared_ptr<std::vector<std::byte>> out;
  if (r.op == hora::CollectiveKind::kAllgather || r.op == hora::CollectiveKind::kAlltoall ||
      r.op == hora::CollectiveKind::kReducescatter) {
    out = std::make_shared<std::vector<std::byte>>();
    const size_t elem = hora::dataTypeSize(r.type);
    r.allocate_output = [out, elem](const std::vector<int64_t>& s) -> void* {
      size_t n = 1;
      for (int64_t d : s) n *= static_cast<size_t>(d);
      out->resize(std::max<size_t>(n * elem, 1));
      return out->data();
    };
  }
  hora::Handle handle = theEngine().enqueue(std::move(r));
  // A request the engine refused at once (a name already in flight, a process set this rank is
  // not in) raises here, as Horovod's enqueue does, rather than at synchronize. error() does not
  // wake the engine, so a held bucket stays held (Note [buckets]).
  if (std::exception_ptr e = handle.error()) {
    try {
      std::rethrow_exception(e);
    } catch (const hora::InvalidArgumentError&) {
      throw;
    } catch (const hora::Error&) {
      // other failures (the engine has stopped) are the handle's, for synchronize
    }
  }
  return PyHandle(std::move(handle), out);
}

// Every failure of a collective is a HoraInternalError (Horovod's HorovodInternalError), with
// subclasses by kind so that programs can tell a mismatch from a lost peer.
void bindErrors(py::module_& m) {
  static py::exception<hora::Error> base(m, "HoraInternalError", PyExc_RuntimeError);
  static py::exception<hora::MismatchError> mismatch(m, "MismatchError", base.ptr());
  static py::exception<hora::PeerError> peer(m, "PeerError", base.ptr());
  static py::exception<hora::TimeoutError> timeout(m, "TimeoutError", base.ptr());
  static py::exception<hora::ShutdownError> shutdown(m, "ShutdownError", base.ptr());
  // Not a failure: an elastic job's driver has no place for this worker (hora.torch.elastic.run
  // lets the process exit with code 0), hence not a HoraInternalError.
  static py::exception<hora::WorkerRemovedError> removed(m, "WorkerRemovedError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hora::WorkerRemovedError& e) {
      PyErr_SetString(removed.ptr(), e.what());
    } catch (const hora::InvalidArgumentError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const hora::MismatchError& e) {
      PyErr_SetString(mismatch.ptr(), e.what());
    } catch (const hora::PeerError& e) {
      PyErr_SetString(peer.ptr(), e.what());
    } catch (const hora::TimeoutError& e) {
      PyErr_SetString(timeout.ptr(), e.what());
    } catch (const hora::ShutdownError& e) {
      PyErr_SetString(shutdown.ptr(), e.what());
    } catch (const hora::Error& e) {
      PyErr_SetString(base.ptr(), e.what());
    }
  });
}

// init, shutdown and what describes the running engine.
void bindLifetime(py::module_& m) {
  m.def("init", [] {
    std::lock_guard lock(engine_mutex);
    if (engine) return;
    py::gil_scoped_release release;  // connecting to the peers takes a while
    setEngine(std::make_shared<hora::Engine>(hora::Communicator::fromEnvironment(),
                                             hora::EngineOptions::fromEnvironment()));
  });
  m.def("set_compute_threads", &hora::Engine::setComputeThreads, py::arg("threads"),
        "How many threads of this process compute (torch.get_num_threads()): hora's waiting "
        "threads spin only while those leave them a core.");
  m.def("shutdown", [](const std::string& why) {
    std::lock_guard lock(engine_mutex);
    if (!engine) return;
    py::gil_scoped_release release;
    engine->shutdown(why);  // the other ranks' errors name this rank and `why` (Note [departures])
    setEngine(nullptr);
  }, py::arg("why") = "");
  m.def("is_initialized", [] { return engine != nullptr; });
  m.def("identity", [] {
    const hora::Identity& id = theEngine().identity();
    return py::dict(py::arg("rank") = id.rank, py::arg("size") = id.size, py::arg("local_rank") = id.local_rank,
                    py::arg("local_size") = id.local_size, py::arg("cross_rank") = id.cross_rank,
                    py::arg("cross_size") = id.cross_size, py::arg("hostname") = id.hostname,
                    py::arg("generation") = id.generation);
  });
  m.def("is_elastic", [] { return hora::elastic::enabled(); });
  m.def("elastic_host_updates", [] {  // (counter, kind) of the driver's host changes (docs/elastic.md)
    hora::elastic::HostUpdates updates;
    {
      py::gil_scoped_release release;
      updates = hora::elastic::hostUpdates();
    }
    return py::make_tuple(updates.counter, updates.kind);
  });
  m.def("engine_stats", [] {  // counters of the global process set's engine, for benchmarks
    const hora::EngineStats s = theEngine().stats();
    return py::dict(py::arg("cycles") = s.cycles, py::arg("full_negotiations") = s.full_negotiations,
                    py::arg("cached_responses") = s.cached_responses, py::arg("fused_allreduces") = s.fused_allreduces,
                    py::arg("negotiation_seconds") = s.negotiation_seconds);
  });
  m.def("start_timeline", [](const std::string& path, bool mark_cycles, bool all_ranks) {
    theEngine().startTimeline(path, mark_cycles, all_ranks);
  }, py::arg("path"), py::arg("mark_cycles") = false, py::arg("all_ranks") = false);
  m.def("stop_timeline", [] { theEngine().stopTimeline(); });
}

// enqueue and its Handle; join and barrier, which wait here.
void bindRequests(py::module_& m) {
  m.def("enqueue", &enqueue, py::arg("name"), py::arg("op"), py::arg("dtype"), py::arg("shape"), py::arg("input"),
        py::arg("output"), py::arg("reduce_op") = 0, py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
        py::arg("root") = 0, py::arg("splits") = std::vector<int64_t>{}, py::arg("process_set") = 0);
  py::class_<PyHandle>(m, "Handle")
      .def("poll", &PyHandle::poll)
      .def("wait", &PyHandle::wait, py::arg("timeout_seconds") = 365.0 * 24 * 3600)
      .def("output_shape", &PyHandle::outputShape)
      .def("output", &PyHandle::output);
  m.def("join", [](int process_set) {
    auto last = std::make_shared<int32_t>(-1);
    hora::Handle h = theEngine().join(last.get(), process_set);
    {
      py::gil_scoped_release release;
      h.wait();
    }
    return *last;
  }, py::arg("process_set") = 0);
  m.def("barrier", [](int process_set) {
    hora::Handle h = theEngine().barrier(process_set);
    py::gil_scoped_release release;
    h.wait();
  }, py::arg("process_set") = 0);
}

// --- the engine for op libraries (engine_access.h) ------------------------------------------

void accessEnqueue(const hora_engine_request* in, void* context, hora_engine_allocate_fn allocate,
                   hora_engine_done_fn done) {
  std::function<void(std::exception_ptr)> finish = [context, done](std::exception_ptr e) {
    if (!e) return done(context, HORA_OK, "");
    try {
      std::rethrow_exception(e);
    } catch (const hora::Error& error) {
      done(context, hora_status_of_error_kind(static_cast<int>(error.kind())), error.what());
    } catch (const std::exception& error) {
      done(context, HORA_ERR_INTERNAL, error.what());
    }
  };
  const std::shared_ptr<hora::Engine> e = currentEngine();
  if (!e) return done(context, HORA_ERR_INVALID_ARGUMENT, kNotInitialized);
  try {
    hora::Request r;
    r.name = in->name;
    r.op = static_cast<hora::CollectiveKind>(in->op);
    r.type = static_cast<hora::DataType>(in->dtype);
    r.shape.assign(in->shape, in->shape + in->ndims);
    r.input = in->input;
    r.output = in->output;
    r.reduce = {static_cast<hora::ReduceOp>(in->reduce_op), in->prescale, in->postscale};
    r.root = in->root;
    if (in->splits) r.splits.assign(in->splits, in->splits + in->nsplits);
    r.process_set = in->process_set;
    if (allocate) {
      r.allocate_output = [context, allocate](const std::vector<int64_t>& shape) {
        return allocate(context, shape.data(), static_cast<int>(shape.size()));
      };
    }
    if (r.op == hora::CollectiveKind::kJoin)
      e->join(static_cast<int32_t*>(in->output), in->process_set, std::move(finish));
    else
      e->enqueue(std::move(r), std::move(finish));
  } catch (...) {  // the engine reports its refusals through `finish`; this is anything else
    finish(std::current_exception());
  }
}

// The global ranks of a process set, or nothing for a set the engine does not know.
std::optional<std::vector<int>> ranksOf(const hora::Engine& e, int process_set) {
  try {
    return e.processSetRanks(process_set);
  } catch (const hora::Error&) {
    return std::nullopt;
  }
}

int accessTopology(int what, int process_set) {
  const std::shared_ptr<hora::Engine> e = currentEngine();
  if (what == HORA_TOPOLOGY_INITIALIZED) return e != nullptr;
  if (!e) return HORA_TOPOLOGY_ERROR_INIT;
  const hora::Identity& id = e->identity();
  switch (what) {
    case HORA_TOPOLOGY_RANK: return id.rank;
    case HORA_TOPOLOGY_SIZE: return id.size;
    case HORA_TOPOLOGY_LOCAL_RANK: return id.local_rank;
    case HORA_TOPOLOGY_LOCAL_SIZE: return id.local_size;
    default: break;
  }
  const std::optional<std::vector<int>> ranks = ranksOf(*e, process_set);
  if (!ranks) return HORA_TOPOLOGY_ERROR_UNKNOWN_SET;
  if (what == HORA_TOPOLOGY_SET_SIZE) return static_cast<int>(ranks->size());
  if (what == HORA_TOPOLOGY_SET_INCLUDED) return std::find(ranks->begin(), ranks->end(), id.rank) != ranks->end();
  return HORA_TOPOLOGY_ERROR_UNKNOWN_SET;
}

int accessMemberIndex(int process_set, int rank) {
  const std::shared_ptr<hora::Engine> e = currentEngine();
  if (!e) return HORA_TOPOLOGY_ERROR_INIT;
  const std::optional<std::vector<int>> ranks = ranksOf(*e, process_set);
  if (!ranks) return HORA_TOPOLOGY_ERROR_UNKNOWN_SET;
  const auto at = std::find(ranks->begin(), ranks->end(), rank);
  return at == ranks->end() ? -1 : static_cast<int>(at - ranks->begin());
}

const hora_engine_access kEngineAccess = {HORA_ENGINE_ACCESS_VERSION, sizeof(hora_engine_access), &accessEnqueue,
                                          &accessTopology, &accessMemberIndex};

void bindProcessSets(py::module_& m) {
  m.def("add_process_set", [](std::vector<int> ranks) {
    py::gil_scoped_release release;
    return theEngine().addProcessSet(std::move(ranks));
  });
  m.def("remove_process_set", [](int id) {
    py::gil_scoped_release release;
    theEngine().removeProcessSet(id);
  });
  m.def("process_set_ranks", [](int id) { return theEngine().processSetRanks(id); });
  m.def("process_set_ids", [] { return theEngine().processSetIds(); });
  m.def("engine_access", [] { return reinterpret_cast<uintptr_t>(&kEngineAccess); },
        "The address of the engine's table for op libraries (hora/engine_access.h)");
}

// The enums' values, so Python never hard-codes them: ALLREDUCE, ALLGATHER, ... (one per
// CollectiveKind, named by toString), DATA_TYPES and REDUCE_OPS.
void bindConstants(py::module_& m) {
  for (int i = 0; i < hora::kNumCollectiveKinds; ++i) {
    std::string name(hora::toString(static_cast<hora::CollectiveKind>(i)));
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    m.attr(name.c_str()) = i;
  }
  py::dict types;
  for (int i = 0; i < hora::kNumDataTypes; ++i)
    types[std::string(hora::toString(static_cast<hora::DataType>(i))).c_str()] = i;
  m.attr("DATA_TYPES") = types;
  py::dict ops;
  for (auto [name, o] : {std::pair{"Sum", hora::ReduceOp::kSum}, {"Average", hora::ReduceOp::kAverage},
                         {"Min", hora::ReduceOp::kMin}, {"Max", hora::ReduceOp::kMax},
                         {"Product", hora::ReduceOp::kProduct},
                         {"Adasum", hora::ReduceOp::kAdasum}})
    ops[name] = static_cast<int>(o);
  m.attr("REDUCE_OPS") = ops;
}

}  // namespace

void bindParameterServers(py::module_& m);  // ps_module.cc

PYBIND11_MODULE(_core, m) {
  m.doc() = "hora's engine for Python frontends (tensors cross as data pointers)";
  bindErrors(m);
  bindLifetime(m);
  bindRequests(m);
  bindProcessSets(m);
  bindConstants(m);
  bindParameterServers(m);
}
