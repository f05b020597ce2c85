#include "launcher/hydra_ssh.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>

namespace hora::launcher {
namespace {

volatile std::sig_atomic_t child_pid = 0;

void forward(int sig) {
  if (child_pid > 0) ::kill(child_pid, sig);
}

}  // namespace

HydraSsh::HydraSsh(const SshOptions& options) {
  std::string pattern = (std::filesystem::temp_directory_path() / "horarun-ssh.XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error(std::string("mkdtemp failed: ") + std::strerror(errno));
  dir_ = pattern;
  path_ = dir_ + "/ssh";
  std::string flags;
  if (options.port > 0) flags += " -p " + std::to_string(options.port);
  if (!options.identity_file.empty()) flags += " -i " + shellQuote(options.identity_file);
  std::ofstream(path_) << "#!/bin/sh\nexec ssh" << flags << " \"$@\"\n";
  ::chmod(path_.c_str(), 0700);
}

HydraSsh::~HydraSsh() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

int runForwardingSignals(const std::vector<std::string>& argv) {
  std::vector<char*> raw;
  for (const auto& a : argv) raw.push_back(const_cast<char*>(a.c_str()));
  raw.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    ::execvp(raw[0], raw.data());
    std::cerr << "horarun: cannot execute " << argv[0] << ": " << std::strerror(errno) << "\n";
    ::_exit(127);
  }
  child_pid = pid;
  struct sigaction sa {};
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  child_pid = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace hora::launcher
