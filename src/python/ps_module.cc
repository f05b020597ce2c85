// hora._core.PsClient: a worker's ParameterServerClient (include/hora/ps.h) for the Python
// frontends; tensors cross as data pointers of contiguous float32 or float64 buffers (each of its
// tensor's registered dtype), as in module.cc.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "hora/errors.h"
#include "hora/ps.h"

namespace py = pybind11;

namespace {

template <typename T>
std::vector<T*> pointers(const std::vector<uintptr_t>& addresses) {
  std::vector<T*> out;
  out.reserve(addresses.size());
  for (uintptr_t a : addresses) out.push_back(reinterpret_cast<T*>(a));
  return out;
}

// A PsOptimizerState's buffers as Python passes them: addresses by slot, then by tensor.
using SlotAddresses = std::vector<std::vector<uintptr_t>>;

std::vector<std::vector<void*>> slotPointers(const SlotAddresses& slots) {
  std::vector<std::vector<void*>> out;
  for (const auto& slot : slots) out.push_back(pointers<void>(slot));
  return out;
}

// "float32" | "float64" by tensor, as PsOptions::dtypes.
std::vector<hora::PsDtype> psDtypes(const std::vector<std::string>& names) {
  std::vector<hora::PsDtype> out;
  for (const std::string& name : names) {
    if (name != "float32" && name != "float64")
      throw hora::InvalidArgumentError("parameter server tensor dtype '" + name + "': expected float32 or float64");
    out.push_back(name == "float64" ? hora::PsDtype::kFloat64 : hora::PsDtype::kFloat32);
  }
  return out;
}

// `optimizer` (ps-async): {"name": "sgd" | "adam" | "adagrad" | "rmsprop" | "adamax" | "adadelta" |
// "nadam" | "radam", "lr", "momentum", "beta1", "beta2", "epsilon", "rho", "centered", "lr_decay",
// "initial_accumulator_value", "momentum_decay", "nadam_torch1_form", "weight_decay",
// "decoupled_weight_decay", "keras_form"}, each optional (PsOptions' defaults).
hora::PsOptions psOptions(const std::string& mode, bool average, int64_t max_staleness, const py::dict& optimizer) {
  hora::PsOptions o;
  if (mode == "ps-sync") {
    o.mode = hora::PsMode::kSync;
  } else if (mode == "ps-async") {
    o.mode = hora::PsMode::kAsync;
  } else {
    throw hora::InvalidArgumentError("parameter server mode '" + mode + "': expected ps-sync or ps-async");
  }
  o.average = average;
  o.max_staleness = max_staleness;
  const std::string name = optimizer.contains("name") ? optimizer["name"].cast<std::string>() : "sgd";
  if (name == "adam") {
    o.optimizer = hora::PsOptimizer::kAdam;
  } else if (name == "adagrad") {
    o.optimizer = hora::PsOptimizer::kAdagrad;
  } else if (name == "rmsprop") {
    o.optimizer = hora::PsOptimizer::kRmsprop;
  } else if (name == "adamax") {
    o.optimizer = hora::PsOptimizer::kAdamax;
  } else if (name == "adadelta") {
    o.optimizer = hora::PsOptimizer::kAdadelta;
  } else if (name == "nadam") {
    o.optimizer = hora::PsOptimizer::kNadam;
  } else if (name == "radam") {
    o.optimizer = hora::PsOptimizer::kRadam;
  } else if (name != "sgd") {
    throw hora::InvalidArgumentError("parameter server optimizer '" + name +
                                     "': expected sgd, adam, adagrad, rmsprop, adamax, adadelta, nadam or radam");
  }
  const auto number = [&](const char* key, double fallback) {
    return optimizer.contains(key) ? optimizer[key].cast<double>() : fallback;
  };
  const auto flag = [&](const char* key) { return optimizer.contains(key) && optimizer[key].cast<bool>(); };
  o.lr = number("lr", o.lr);
  o.momentum = number("momentum", o.momentum);
  o.beta1 = number("beta1", o.beta1);
  o.beta2 = number("beta2", o.beta2);
  o.epsilon = number("epsilon", o.epsilon);
  o.rho = number("rho", o.rho);
  o.centered = flag("centered");
  o.lr_decay = number("lr_decay", o.lr_decay);
  o.initial_accumulator_value = number("initial_accumulator_value", o.initial_accumulator_value);
  o.momentum_decay = number("momentum_decay", o.momentum_decay);
  o.nadam_torch1_form = flag("nadam_torch1_form");
  o.weight_decay = number("weight_decay", o.weight_decay);
  o.decoupled_weight_decay = flag("decoupled_weight_decay");
  o.keras_form = flag("keras_form");
  return o;
}

// PsClient(...): connects (GIL released: connecting waits for the servers).
std::unique_ptr<hora::ParameterServerClient> connect(const std::vector<size_t>& elements, const std::string& mode,
                                                     bool average, int64_t max_staleness,
                                                     const std::vector<uintptr_t>& initial, const py::dict& optimizer,
                                                     bool fp16, const py::object& place,
                                                     const py::object& initial_state,
                                                     const std::vector<std::string>& dtypes) {
  hora::PsOptions options = psOptions(mode, average, max_staleness, optimizer);
  options.fp16 = fp16;
  options.dtypes = psDtypes(dtypes);
  std::optional<hora::PsOptimizerState> state;
  if (!initial_state.is_none()) {
    const auto [step, slots] = initial_state.cast<std::tuple<uint64_t, SlotAddresses>>();
    state = hora::PsOptimizerState{step, slotPointers(slots)};
  }
  hora::PsJob job = hora::PsJob::fromEnvironment();
  if (!place.is_none()) {  // an elastic job's (generation, rank, size): HORA_RANK is its start's
    const auto [generation, worker, workers] = place.cast<std::tuple<int, int, int>>();
    job = job.inGeneration(generation, worker, workers);
  }
  py::gil_scoped_release release;
  return std::make_unique<hora::ParameterServerClient>(job, elements, options, pointers<void>(initial),
                                                       state ? &*state : nullptr);
}

// The module's functions of the parameter servers (PsClient's are bound below).
void bindJobFunctions(py::module_& m) {
  m.def(
      "ps_job_servers", [] { return hora::PsJob::fromEnvironment().servers; },
      "The number of this job's parameter servers (HORA_PS_SERVERS), or InvalidArgumentError when it has none.");
  m.def("async_momentum_warning", &hora::asyncMomentumWarning, py::arg("workers"), py::arg("momentum"),
        "What to warn of when ps-async with this many workers runs with this explicit momentum, or ''.");
}

// PsClient's constructor.
constexpr const char* kConnectDoc =
    "Connects this worker to every parameter server of the job (HORA_PS_SERVERS), or with `place` = "
    "(generation, rank, size) of an elastic job to that generation's servers, and registers "
    "tensors of these element counts and `dtypes` ('float32' or 'float64' by tensor; empty: all float32); "
    "ps-async overwrites `initial` with the servers' parameters "
    "and applies pushes with `optimizer` ({'name': 'sgd' | 'adam' | 'adagrad' | 'rmsprop' | 'adamax' | "
    "'adadelta' | 'nadam' | 'radam', 'lr', 'momentum', 'beta1', 'beta2', 'epsilon', 'rho', 'centered', "
    "'lr_decay', 'initial_accumulator_value', 'momentum_decay', 'nadam_torch1_form', 'weight_decay', "
    "'decoupled_weight_decay', 'keras_form'}), starting from `initial_state` = (step, addresses by slot, then "
    "by tensor) when given.";

}  // namespace

void bindParameterServers(py::module_& m) {
  py::class_<hora::ParameterServerClient>(m, "PsClient")
      .def(py::init(&connect),
           py::arg("elements"), py::arg("mode"), py::arg("average") = true, py::arg("max_staleness") = -1,
           py::arg("initial") = std::vector<uintptr_t>{}, py::arg("optimizer") = py::dict(), py::arg("fp16") = false,
           py::arg("place") = py::none(), py::arg("initial_state") = py::none(),
           py::arg("dtypes") = std::vector<std::string>{},
           kConnectDoc)
      .def(
          "step",
          [](hora::ParameterServerClient& c, const std::vector<uintptr_t>& gradients,
             const std::vector<uintptr_t>& outputs) {
            const auto in = pointers<const void>(gradients);
            const auto out = pointers<void>(outputs);
            hora::PsStep s;
            {
              py::gil_scoped_release release;  // the tuple below needs the GIL back
              s = c.step(in, out);
            }
            return py::make_tuple(s.step, s.slowest, s.version);
          },
          py::arg("gradients"), py::arg("outputs"),
          "Pushes the gradients, writes the answer into `outputs`; returns (this worker's step, the slowest "
          "live worker's step, the push's place in the first server's order).")
      .def(
          "ready",
          [](hora::ParameterServerClient& c, size_t tensor, uintptr_t gradient) {
            c.ready(tensor, reinterpret_cast<const void*>(gradient));
          },
          py::arg("tensor"), py::arg("gradient"),
          "Tensor `tensor`'s gradient of the next step is final at address `gradient` (read until step() "
          "returns): its push begins while the backward pass goes on.")
      .def(
          "pull_optimizer_state",
          [](hora::ParameterServerClient& c, const SlotAddresses& slots) {
            const auto out = slotPointers(slots);
            py::gil_scoped_release release;
            return c.pullOptimizerState(out);
          },
          py::arg("slots"),
          "ps-async, between steps: writes the servers' optimizer state into `slots` (addresses by slot, "
          "then by tensor) and returns its step count.")
      .def("nadam_momentum_product", &hora::ParameterServerClient::nadamMomentumProduct, py::arg("step"),
           "NAdam: the product of momenta after `step` of the servers' steps, with the beta1 they apply.")
      .def_property_readonly(
          "optimizer_slots", [](const hora::ParameterServerClient& c) { return c.optimizerSlots(); },
          "How many slots the servers' optimizer keeps (0 in ps-sync): see hora::psOptimizerSlots.")
      .def("set_sgd", &hora::ParameterServerClient::setSgd, py::arg("lr"), py::arg("momentum"),
           "ps-async: the learning rate and momentum (SGD's, RMSprop's) the servers apply this worker's next "
           "pushes with.")
      .def("close", [](hora::ParameterServerClient& c) {
        py::gil_scoped_release release;
        c.close();
      })
      .def_property_readonly("servers", &hora::ParameterServerClient::servers);
  bindJobFunctions(m);
}
