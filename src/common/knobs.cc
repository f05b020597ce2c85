#include "common/knobs.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/logging.h"
#include "hora/errors.h"

namespace hora::common {
namespace {

using G = KnobGroup;
using S = KnobScope;

// Note [knob table]: adding a variable here is the only way to read one (processVariable reads
// only those horarun passes on by name, never to configure hora). Keep names sorted
// within a group; the help text is a complete sentence for docs/knobs.md.
constexpr KnobSpec kKnobs[] = {
    {"HORA_RANK", "HOROVOD_RANK", G::kLauncherSet, S::kRank, "0", "Rank of this process in the job."},
    {"HORA_SIZE", "HOROVOD_SIZE", G::kLauncherSet, S::kRank, "1", "Number of ranks in the job."},
    {"HORA_LOCAL_RANK", "HOROVOD_LOCAL_RANK", G::kLauncherSet, S::kRank, "0",
     "Rank among the processes of this host."},
    {"HORA_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE", G::kLauncherSet, S::kRank, "1",
     "Number of ranks on this host."},
    {"HORA_CROSS_RANK", "HOROVOD_CROSS_RANK", G::kLauncherSet, S::kRank, "0",
     "Rank among the processes with the same local rank on other hosts."},
    {"HORA_CROSS_SIZE", "HOROVOD_CROSS_SIZE", G::kLauncherSet, S::kRank, "1",
     "Number of ranks with this local rank across hosts."},
    {"HORA_HOSTNAME", "HOROVOD_HOSTNAME", G::kLauncherSet, S::kRank, "",
     "Name of this host as the launcher knows it; tells hosts apart."},
    {"HORA_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_ADDR", G::kLauncherSet, S::kRank, "",
     "Address of the rendezvous store served by the launcher."},
    {"HORA_RENDEZVOUS_PORT", "HOROVOD_GLOO_RENDEZVOUS_PORT", G::kLauncherSet, S::kRank, "",
     "Port of the rendezvous store."},
    {"HORA_SECRET", "", G::kLauncherSet, S::kRank, "",
     "Job secret that authenticates every store request and peer connection (HMAC-SHA256). "
     "Set by the launcher in the environment, never on a command line."},
    {"HORA_SERVE_STORE", "", G::kLauncherSet, S::kRank, "0",
     "1 = this process serves the rendezvous store itself, on HORA_RENDEZVOUS_ADDR:HORA_RENDEZVOUS_PORT "
     "(an address of its own host), for the life of the process: set on rank 0 only, by runners that "
     "start the ranks without horarun (hora.spark, hora.ray)."},
    {"HORA_ELASTIC", "HOROVOD_ELASTIC", G::kLauncherSet, S::kJob, "0",
     "1 = this worker belongs to an elastic job (horarun --min-np/--max-np/--host-discovery-script): "
     "its rank and size come from the driver at each generation (docs/elastic.md), not from HORA_RANK."},
    {"HORA_ELASTIC_WORKER_ID", "", G::kLauncherSet, S::kRank, "",
     "An elastic worker's name for the driver, host:slot, stable for the life of the process."},
    {"HORA_ELASTIC_TIMEOUT_SECONDS", "HOROVOD_ELASTIC_TIMEOUT", G::kLauncherSet, S::kJob, "600",
     "How long an elastic worker waits for the driver to place it in a generation, and how long the "
     "driver waits for at least --min-np workers (horovodrun's --elastic-timeout)."},
    {"HORA_ELASTIC_JOIN_WINDOW_SECONDS", "", G::kLauncherSet, S::kJob, "10",
     "How long horarun's elastic driver waits, after the first worker asks to join the next "
     "generation, for the previous generation's other members before it forms the generation "
     "without them (if at least --min-np asked) and blacklists the hosts of those that did not."},
    {"HORA_PS_SERVERS", "", G::kLauncherSet, S::kJob, "0",
     "Number of parameter server processes of the job (horarun --servers K); 0 = none. Workers connect "
     "to them when an optimizer asks for a ps-sync or ps-async mode (docs/parameter_servers.md)."},
    {"HORA_PS_SERVER_INDEX", "", G::kLauncherSet, S::kRank, "0",
     "Set in a parameter server process only: its number, 0 to HORA_PS_SERVERS - 1."},
    {"HORA_PS_GENERATION", "", G::kLauncherSet, S::kRank, "",
     "Set in a parameter server of an elastic job only: the generation it serves, whose store prefix "
     "its keys go under (docs/parameter_servers.md, \"Servers in an elastic job\")."},
    {"OMPI_COMM_WORLD_RANK", "", G::kForeignLauncher, S::kRank, "", "Rank, as OpenMPI's mpirun sets it (used without horarun)."},
    {"OMPI_COMM_WORLD_SIZE", "", G::kForeignLauncher, S::kRank, "", "Number of ranks, as OpenMPI's mpirun sets it."},
    {"OMPI_COMM_WORLD_LOCAL_SIZE", "", G::kForeignLauncher, S::kRank, "",
     "Ranks on this host (OpenMPI); equal to the size, the store is on 127.0.0.1."},
    {"OMPI_MCA_ess_base_jobid", "", G::kForeignLauncher, S::kRank, "",
     "OpenMPI's job id: picks the store's port when HORA_RENDEZVOUS_PORT is unset."},
    {"PMI_RANK", "", G::kForeignLauncher, S::kRank, "", "Rank, as MPICH's mpirun (Hydra) sets it (used without horarun)."},
    {"PMI_SIZE", "", G::kForeignLauncher, S::kRank, "", "Number of ranks (MPICH Hydra)."},
    {"MPI_LOCALNRANKS", "", G::kForeignLauncher, S::kRank, "", "Ranks on this host (MPICH Hydra)."},
    {"PMI_FD", "", G::kForeignLauncher, S::kRank, "",
     "Socket to MPICH Hydra's process manager (PMI-1): where the ranks learn rank 0's store address and "
     "the job secret when HORA_RENDEZVOUS_ADDR and HORA_RENDEZVOUS_PORT are unset."},
    {"PMIX_NAMESPACE", "", G::kForeignLauncher, S::kRank, "",
     "Set for ranks of OpenMPI's mpirun (PMIx): they learn rank 0's store address and the job secret "
     "through PMIx when HORA_RENDEZVOUS_ADDR and HORA_RENDEZVOUS_PORT are unset."},
    {"SLURM_PROCID", "", G::kForeignLauncher, S::kRank, "", "Rank, as Slurm's srun sets it (used without horarun)."},
    {"SLURM_NTASKS", "", G::kForeignLauncher, S::kRank, "", "Number of ranks (Slurm)."},
    {"SLURM_JOB_ID", "", G::kForeignLauncher, S::kRank, "", "Slurm's job id (with SLURM_STEP_ID: the store's port)."},
    {"SLURM_STEP_ID", "", G::kForeignLauncher, S::kRank, "", "Slurm's step id."},
    {"SLURM_STEP_NUM_NODES", "", G::kForeignLauncher, S::kRank, "", "Number of hosts of the Slurm step."},
    {"SLURM_STEP_NODELIST", "", G::kForeignLauncher, S::kRank, "",
     "Hosts of the Slurm step; the store runs in rank 0 on the first one."},
    {"TF_CONFIG", "", G::kForeignLauncher, S::kRank, "",
     "TensorFlow's cluster description, as Kubeflow's TFJob and other cluster managers set it: the chief "
     "and worker tasks are the ranks (chief first), and rank 0 serves the store at its own host:port."},
    {"SLURM_JOB_NODELIST", "", G::kForeignLauncher, S::kRank, "",
     "Hosts of the Slurm allocation: horarun run inside one (salloc, sbatch) without -H or --hostfile "
     "starts its ranks there."},
    {"SLURM_TASKS_PER_NODE", "", G::kForeignLauncher, S::kRank, "",
     "Tasks of the Slurm allocation per host (\"2(x3),1\"): horarun's slots on the hosts of SLURM_JOB_NODELIST."},
    {"HORA_SPIN_MICROSECONDS", "", G::kTuning, S::kRank, "50",
     "How long a waiting rank may retry, yielding the CPU between tries, before it sleeps in "
     "poll(): lower latency for small messages. It spins only while no compute thread of its "
     "process needs the core and its last waits ended within the spin. 0 = always sleep."},
    {"HORA_AUTOTUNE", "HOROVOD_AUTOTUNE", G::kTuning, S::kJob, "0",
     "1 = tune the fusion threshold, cycle time, response cache, ring threshold, bucket size "
     "and (across hosts) the hierarchical allreduce/allgather while the job trains, by Bayesian "
     "optimisation of the bytes allreduced per second (docs/autotune.md). Knobs set explicitly "
     "stay fixed."},
    {"HORA_AUTOTUNE_LOG", "HOROVOD_AUTOTUNE_LOG", G::kTuning, S::kRank, "",
     "CSV file to which rank 0 writes every autotuning sample (parameters and score), then the "
     "best parameters; empty = no file."},
    {"HORA_AUTOTUNE_WARMUP_SAMPLES", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", G::kTuning, S::kRank, "3",
     "Autotuning: samples discarded at the start while the job warms up."},
    {"HORA_AUTOTUNE_STEPS_PER_SAMPLE", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", G::kTuning, S::kRank, "10",
     "Autotuning: training steps per sample (a step ends when a tensor name is allreduced "
     "again)."},
    {"HORA_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", G::kTuning, S::kRank, "20",
     "Autotuning: scored samples before the search ends and the best parameters are kept."},
    {"HORA_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", G::kTuning, S::kRank, "0.8",
     "Autotuning: noise (standard deviation, in units of the scores' spread) the Gaussian process "
     "assumes in each score; higher trusts single samples less."},
    {"HORA_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", G::kTuning, S::kJob, "1024",
     "Entries of the engine's response cache; 0 turns it off (every cycle negotiates in full)."},
    {"HORA_SUBMISSION_BOARD", "", G::kTuning, S::kJob, "1",
     "1 = on one host (every rank reached through shared memory), a rank's request for a tensor "
     "the ranks have run before starts an engine cycle only when every rank has submitted it, as "
     "the ranks post their submissions in shared memory; the other ranks' engine threads sleep "
     "meanwhile. 0 = any rank's request starts a cycle that every rank joins."},
    {"HORA_CYCLE_TIME", "HOROVOD_CYCLE_TIME", G::kTuning, S::kRank, "1",
     "Milliseconds between an idle engine's stall checks while some tensor waits for other "
     "ranks (an engine with nothing pending sleeps until there is work). An idle engine sends "
     "nothing; a request on any rank starts a cycle (HORA_BUCKET_BYTES). 0 = cycle "
     "continuously (to measure the negotiation's cost)."},
    {"HORA_BUCKET_BYTES", "", G::kTuning, S::kRank, "1M",
     "An engine holds queued allreduces back until this many bytes are queued, another request "
     "comes, a thread waits for (or polls) one of them, or another rank starts a cycle; then "
     "they are negotiated and fused together. Gradients thus go in buckets, not one cycle each. "
     "0 = start a cycle for every request. Parameter server modes: a worker pushes its "
     "gradients to each server in parts of this size as the backward pass produces them."},
    {"HORA_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", G::kTuning, S::kJob, "128M",
     "Largest fused allreduce in bytes; 0 turns fusion off."},
    {"HORA_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS", G::kTuning, S::kRank, "60",
     "After this many seconds rank 0 warns about tensors that some ranks submitted and others "
     "did not, naming the missing ranks; 0 = never."},
    {"HORA_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", G::kTuning, S::kJob, "0",
     "After this many seconds of a stall the job fails on every rank with an error naming the "
     "tensors and the missing ranks; 0 = never."},
    {"HORA_TIMELINE", "HOROVOD_TIMELINE", G::kTuning, S::kRank, "",
     "Write a Chrome trace-event timeline of the engine to this file (chrome://tracing, Perfetto); "
     "DYNAMIC = none until start_timeline() is called, as in Horovod."},
    {"HORA_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES", G::kTuning, S::kRank, "0",
     "1 = mark the start of every engine cycle in the timeline."},
    {"HORA_TIMELINE_ALL_RANKS", "", G::kTuning, S::kRank, "0",
     "1 = every rank writes its own timeline (the file name gets .rank<N>), so the slow rank "
     "shows; 0 = rank 0 only, as Horovod."},
    {"HORA_CHUNK_BYTES", "", G::kTuning, S::kJob, "256K",
     "Pipelining unit: received data is reduced and forwarded in chunks of this size."},
    {"HORA_HEARTBEAT_TIMEOUT_SECONDS", "", G::kTuning, S::kJob, "3",
     "A peer from which no heartbeat came for this long is declared dead (a stopped or hung "
     "process keeps its sockets open, so only its silence shows); every rank then fails naming it. "
     "Each process sends every peer a datagram every sixth of this. 0 = no heartbeat: a frozen peer "
     "is found by HORA_TIMEOUT_SECONDS only."},
    {"HORA_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE", G::kTuning, S::kJob, "auto",
     "Allreduce across hosts as reduce-scatter inside each host (shared memory), allreduce of "
     "each slice among the hosts (TCP) and allgather inside each host: auto (when the ranks span "
     "hosts with the same number of ranks each, for messages above HORA_RING_THRESHOLD), 1 "
     "(always when the hosts are even) or 0 (never: one flat ring)."},
    {"HORA_HIERARCHICAL_ALLGATHER", "HOROVOD_HIERARCHICAL_ALLGATHER", G::kTuning, S::kJob, "auto",
     "Allgather across hosts as an allgather among the ranks with the same position on every "
     "host (TCP), then inside each host (shared memory): each block crosses to every other host "
     "once whatever the rank placement, in fewer steps than one ring. auto and 1: whenever the "
     "ranks span hosts with the same number of ranks each; 0: never (one flat ring)."},
    {"HORA_HIERARCHICAL_BROADCAST", "", G::kTuning, S::kJob, "auto",
     "Broadcast across hosts as a broadcast among the root's counterparts on the other hosts "
     "(TCP), then inside each host (shared memory): each byte crosses to every other host once "
     "whatever the rank placement. auto: when the ranks span hosts with the same number of "
     "ranks each and are not placed host by host (then the flat chain crosses each link once "
     "too, pipelined); 1: whenever the hosts are even; 0: never (one tree or chain)."},
    {"HORA_IFACE", "HOROVOD_GLOO_IFACE", G::kTuning, S::kRank, "",
     "Network interface whose address peers connect to; default: the one that reaches the "
     "rendezvous store."},
    {"HORA_LOG_LEVEL", "HOROVOD_LOG_LEVEL", G::kTuning, S::kRank, "warning",
     "Log level: trace, debug, info, warning, error, fatal."},
    {"HORA_LOG_HIDE_TIME", "HOROVOD_LOG_HIDE_TIME", G::kTuning, S::kRank, "0",
     "1 = hora's log lines carry no time of day (horarun --log-without-timestamp)."},
    {"HORA_PS_COMPENSATE_MOMENTUM", "", G::kTuning, S::kJob, "0",
     "1 = in ps-async the servers apply momentum max(0, m - (1 - 1/W)) where SGD or RMSprop asks for m "
     "(Adam, Adamax, NAdam or RAdam for beta1 m) with W workers: asynchrony alone acts as momentum of "
     "about 1 - 1/W, and the two compound (docs/parameter_servers.md, \"ps-async and momentum\"). 0 = m as given."},
    {"HORA_PS_START_TIMEOUT_SECONDS", "", G::kTuning, S::kJob, "600",
     "How long a parameter server waits for each worker to connect (workers connect when their "
     "optimizer is made, after the model is built)."},
    {"HORA_RING_THRESHOLD", "", G::kTuning, S::kJob, "512K",
     "Allreduce messages up to this many bytes use recursive doubling (latency-optimal), "
     "larger ones the ring (bandwidth-optimal); broadcasts up to it a binomial tree, larger a "
     "chain. Default measured: the two cross between 512K and 740K at 2 and 4 ranks over TCP."},
    {"HORA_SHM_SPIN_MICROSECONDS", "", G::kTuning, S::kRank, "1000",
     "HORA_SPIN_MICROSECONDS over shared memory: a peer woken from its futex takes about 100 us "
     "to run again on this machine, so ranks may keep yielding longer before they sleep (under "
     "the same conditions)."},
    {"HORA_SHM_INBOX_BYTES", "", G::kTuning, S::kJob, "0",
     "Size of each rank's shared-memory inbox, shared evenly by the rings its peers on the host "
     "write into (each ring holds at least 4 HORA_CHUNK_BYTES; 0 = just that). A deeper ring lets "
     "a sender run further ahead of a receiver that is not scheduled: fewer wake-ups per large "
     "allreduce while training threads hold the cores, but no less engine CPU (measured, "
     "docs/benchmarks/wrn.md), so it is off until a wall-clock gain is shown."},
    {"HORA_SHM_RING_THRESHOLD", "", G::kTuning, S::kJob, "4K",
     "HORA_RING_THRESHOLD for communicators over shared memory: above it the ring (measured: "
     "the ring's extra steps cost little in memory, so it wins from a few KiB)."},
    {"HORA_THREAD_AFFINITY", "HOROVOD_THREAD_AFFINITY", G::kTuning, S::kRank, "",
     "Comma-separated core ids: the engine thread of local rank i runs on the i-th (as Horovod's); "
     "fewer ids than local ranks leaves the threads unpinned, with a warning. Empty = not pinned."},
    {"HORA_TIMEOUT_SECONDS", "HOROVOD_GLOO_TIMEOUT_SECONDS", G::kTuning, S::kJob, "30",
     "Deadline of every blocking wait: a collective, connecting to peers, a store request."},
    {"HORA_TRANSPORT", "", G::kTuning, S::kJob, "auto",
     "Transport between ranks, chosen per pair: auto (shared memory between the ranks of a "
     "host, TCP between hosts), shm (shared memory; an error across hosts) or tcp (TCP for "
     "every pair)."},
};

std::string badValue(std::string_view name, const std::string& value, std::string_view want) {
  std::ostringstream s;
  s << "environment variable " << name << "='" << value << "' is invalid: expected " << want;
  return s.str();
}

}  // namespace

std::span<const KnobSpec> allKnobs() { return kKnobs; }

const KnobSpec& knob(std::string_view name) {
  for (const auto& k : kKnobs)
    if (k.name == name) return k;
  throw InternalError("undeclared knob " + std::string(name) + " (add it to kKnobs)");
}

const KnobSpec* findKnob(std::string_view name) {
  for (const auto& k : kKnobs)
    if (k.name == name || (!k.horovod_alias.empty() && k.horovod_alias == name)) return &k;
  return nullptr;
}

std::string knobsMarkdown() {
  std::ostringstream s;
  s << "| variable | default | Horovod alias | ranks | meaning |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& k : kKnobs) {
    s << "| `" << k.name << "` | " << (k.default_value.empty() ? "-" : k.default_value) << " | "
      << (k.horovod_alias.empty() ? "-" : k.horovod_alias) << " | "
      << (k.scope == KnobScope::kJob ? "same on all" : "may differ") << " | " << k.help << " |\n";
  }
  return s.str();
}

Env Env::fromProcess() {
  Env env;
  for (const auto& k : kKnobs) {
    // The only getenv calls in hora (Note [knob table]).
    if (const char* v = std::getenv(std::string(k.name).c_str())) {
      env.values_.emplace(k.name, v);
    } else if (!k.horovod_alias.empty()) {
      if (const char* a = std::getenv(std::string(k.horovod_alias).c_str())) {
        HORA_LOG(info, "using {}={} as {}", k.horovod_alias, a, k.name);
        env.values_.emplace(k.name, a);
      }
    }
  }
  return env;
}

Env Env::fromMap(const std::map<std::string, std::string>& values) {
  Env env;
  for (const auto& k : kKnobs) {
    auto it = values.find(std::string(k.name));
    if (it == values.end() && !k.horovod_alias.empty())
      it = values.find(std::string(k.horovod_alias));
    if (it != values.end()) env.values_.emplace(k.name, it->second);
  }
  return env;
}

Env Env::overriddenBy(const std::map<std::string, std::string>& values) const {
  Env env = *this;
  for (auto& [name, value] : fromMap(values).values_) env.values_[name] = value;
  return env;
}

std::optional<std::string> processVariable(const std::string& name) {
  if (const char* v = std::getenv(name.c_str())) return v;  // Note [knob table]
  return std::nullopt;
}

std::optional<std::string> Env::raw(std::string_view name) const {
  knob(name);  // reject undeclared names early
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Env::getString(std::string_view name) const {
  auto v = raw(name);
  return v ? *v : std::string(knob(name).default_value);
}

int64_t Env::getInt(std::string_view name, int64_t min, int64_t max) const {
  const std::string text = getString(name);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    throw InvalidArgumentError(badValue(name, text, "an integer in [" + std::to_string(min) +
                                                        ", " + std::to_string(max) + "]"));
  }
  return value;
}

double Env::getDouble(std::string_view name, double min, double max) const {
  const std::string text = getString(name);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || *end != '\0' || !std::isfinite(value) || value < min ||
      value > max) {
    std::ostringstream want;
    want << "a number in [" << min << ", " << max << "]";
    throw InvalidArgumentError(badValue(name, text, want.str()));
  }
  return value;
}

bool Env::getBool(std::string_view name) const {
  const std::string text = getString(name);
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off" || text.empty()) return false;
  throw InvalidArgumentError(badValue(name, text, "0 or 1"));
}

std::optional<int64_t> parseBytes(std::string_view text) {
  if (text.empty()) return std::nullopt;
  int64_t multiplier = 1;
  switch (text.back()) {
    case 'K': case 'k': multiplier = int64_t{1} << 10; break;
    case 'M': case 'm': multiplier = int64_t{1} << 20; break;
    case 'G': case 'g': multiplier = int64_t{1} << 30; break;
    default: break;
  }
  if (multiplier != 1) text.remove_suffix(1);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  if (value > INT64_MAX / multiplier) return std::nullopt;
  return value * multiplier;
}

int64_t Env::getBytes(std::string_view name, int64_t min, int64_t max) const {
  const std::string text = getString(name);
  auto value = parseBytes(text);
  if (!value || *value < min || *value > max) {
    throw InvalidArgumentError(badValue(
        name, text, "a byte count (suffix K, M or G allowed) in [" + std::to_string(min) + ", " +
                        std::to_string(max) + "]"));
  }
  return *value;
}

}  // namespace hora::common
