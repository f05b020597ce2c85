#include "harness.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "hora/errors.h"

extern char** environ;

namespace hora::testing {

namespace {
std::map<std::string, Scenario>& scenarios() {
  static std::map<std::string, Scenario> s;
  return s;
}
std::atomic<int> job_counter{0};
}  // namespace

std::vector<std::string> horaSegments(const std::vector<pid_t>& owners) {
  std::vector<std::string> prefixes;
  for (pid_t p : owners) prefixes.push_back("hora." + std::to_string(p) + ".");
  if (owners.empty()) prefixes.push_back("hora.");
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    for (const auto& prefix : prefixes) {
      if (name.rfind(prefix, 0) == 0) left.push_back(entry.path().string());
    }
  }
  return left;
}

CommunicatorOptions testOptions() {
  CommunicatorOptions o;
  o.timeout = std::chrono::seconds(60);
  return o;
}

namespace {

// Runs fn(rank's communicator) on `size` threads sharing one in-process store; returns each
// rank's exception message ("" when it returned normally).
std::vector<std::string> runRanks(int size, const CommunicatorOptions& options, const std::vector<std::string>& hosts,
                                  const std::function<void(std::unique_ptr<Communicator>)>& fn) {
  rendezvous::TcpStoreServer store("127.0.0.1", 0, kTestSecret);
  const std::string prefix = "job" + std::to_string(job_counter++) + "/";
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        Identity id;
        id.rank = r;
        id.size = size;
        id.local_rank = r;
        id.local_size = size;
        id.hostname = "localhost";
        if (!hosts.empty()) {
          id.local_rank = id.local_size = id.cross_rank = id.cross_size = Identity::kDerive;
          id.hostname = hosts[static_cast<size_t>(r)];
        }
        fn(Communicator::create(id, {"127.0.0.1", store.port(), kTestSecret, prefix}, options));
      } catch (const std::exception& e) {
        auto& slot = errors[static_cast<size_t>(r)];
        slot = e.what();
        if (slot.empty()) slot = "(empty message)";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace

std::vector<std::string> runThreadsCollectErrors(int size, const std::function<void(Communicator&)>& fn,
                                                 const CommunicatorOptions& options,
                                                 const std::vector<std::string>& hosts) {
  return runRanks(size, options, hosts, [&](std::unique_ptr<Communicator> comm) { fn(*comm); });
}

std::vector<std::string> runEngines(int size, const std::function<void(Engine&)>& fn,
                                    const EngineOptions& options, const CommunicatorOptions& comm_options,
                                    const std::vector<std::string>& hosts) {
  return runRanks(size, comm_options, hosts, [&](std::unique_ptr<Communicator> comm) {
    Engine engine(std::move(comm), options);
    fn(engine);
  });
}

void runThreads(int size, const std::function<void(Communicator&)>& fn,
                const CommunicatorOptions& options, const std::vector<std::string>& hosts) {
  const auto errors = runThreadsCollectErrors(size, fn, options, hosts);
  for (int r = 0; r < size; ++r)
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r << " of " << size << " threw";
}

bool registerScenario(const std::string& name, Scenario fn) {
  scenarios()[name] = std::move(fn);
  return true;
}

void runWorkerIfRequested(int argc, char** argv) {
  const std::string flag = "--hora-worker=";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(flag, 0) != 0) continue;
    auto it = scenarios().find(arg.substr(flag.size()));
    if (it == scenarios().end()) {
      std::fprintf(stderr, "unknown scenario %s\n", arg.c_str());
      std::_Exit(90);
    }
    int code;
    try {
      code = it->second();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "scenario threw: %s\n", e.what());
      code = 91;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    std::exit(code);
  }
}

ProcessJob::ProcessJob(int size, const std::string& scenario, std::map<std::string, std::string> env,
                       const std::vector<std::string>& hosts)
    : store_(std::make_unique<rendezvous::TcpStoreServer>("127.0.0.1", 0, kTestSecret)) {
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) throw std::runtime_error("readlink /proc/self/exe failed");
  const std::string flag = "--hora-worker=" + scenario;
  for (int r = 0; r < size; ++r) {
    std::map<std::string, std::string> e = env;
    e.emplace("HORA_RANK", std::to_string(r));
    e.emplace("HORA_SIZE", std::to_string(size));
    e.emplace("HORA_RENDEZVOUS_ADDR", "127.0.0.1");
    e.emplace("HORA_RENDEZVOUS_PORT", std::to_string(store_->port()));
    e.emplace("HORA_SECRET", kTestSecret);
    if (!hosts.empty()) e.emplace("HORA_HOSTNAME", hosts[static_cast<size_t>(r)]);
    std::vector<std::string> strings;
    for (char** p = environ; *p; ++p) {
      const std::string s = *p;
      if (s.rfind("HORA_", 0) != 0) strings.push_back(s);
    }
    for (const auto& [k, v] : e) strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string arg0 = self, arg1 = flag;
    char* argv[] = {arg0.data(), arg1.data(), nullptr};
    output_files_.push_back("/tmp/hora-test-" + std::to_string(::getpid()) + "-" +
                            std::to_string(job_counter++) + "-rank" + std::to_string(r) + ".log");
    const int out = ::open(output_files_.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
      ::execve(self, argv, envp.data());
      ::_exit(92);
    }
    ::close(out);
    pids_.push_back(pid);
  }
}

ProcessJob::~ProcessJob() {
  for (pid_t p : pids_)
    if (p > 0) {
      ::kill(p, SIGKILL);
      ::kill(p, SIGCONT);
      ::waitpid(p, nullptr, 0);
    }
  for (const auto& f : output_files_) ::unlink(f.c_str());
}

std::string ProcessJob::outputOf(int rank) const {
  std::ifstream in(output_files_[static_cast<size_t>(rank)]);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool ProcessJob::waitForOutput(int rank, const std::string& text, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (outputOf(rank).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::vector<WorkerOutcome> ProcessJob::wait(std::chrono::milliseconds timeout) {
  std::vector<WorkerOutcome> out(pids_.size());
  const auto until = std::chrono::steady_clock::now() + timeout;
  size_t left = pids_.size();
  while (left > 0) {
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] <= 0) continue;
      int status = 0;
      if (::waitpid(pids_[r], &status, WNOHANG) == pids_[r]) {
        out[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        out[r].ended = std::chrono::steady_clock::now();
        pids_[r] = -1;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > until) {
      for (size_t r = 0; r < pids_.size(); ++r)
        if (pids_[r] > 0) {
          ADD_FAILURE() << "rank " << r << " did not exit within " << timeout.count() << " ms (hang)";
          ::kill(pids_[r], SIGKILL);
          ::kill(pids_[r], SIGCONT);
          ::waitpid(pids_[r], nullptr, 0);
          out[r].exit_code = 128 + SIGKILL;
          out[r].ended = std::chrono::steady_clock::now();
          pids_[r] = -1;
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t r = 0; r < out.size(); ++r) out[r].output = outputOf(static_cast<int>(r));
  return out;
}

}  // namespace hora::testing

int main(int argc, char** argv) {
  hora::testing::runWorkerIfRequested(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
