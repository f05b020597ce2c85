#include "launcher/output_forwarder.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace hora::launcher {

OutputForwarder::~OutputForwarder() {
  for (auto& s : streams_)
    if (s->file) std::fclose(s->file);
  for (auto& [key, file] : agent_files_) std::fclose(file);
}

std::FILE* OutputForwarder::fileOf(int rank, bool is_stderr) {
  auto& file = agent_files_[{rank, is_stderr}];
  if (file) return file;
  const std::string dir = output_dir_ + "/rank." + std::to_string(rank);
  ::mkdir(output_dir_.c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  file = std::fopen((dir + (is_stderr ? "/stderr" : "/stdout")).c_str(), "w");
  return file;
}

std::pair<common::Fd, common::Fd> OutputForwarder::addWorker(int rank, bool prefixed) {
  common::Fd ends[2][2];
  for (auto& e : ends) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
    e[0] = common::Fd(p[0]);
    e[1] = common::Fd(p[1]);
    common::setNonBlocking(p[0]);
  }
  std::string dir;
  if (!output_dir_.empty() && !prefixed) {
    dir = output_dir_ + "/rank." + std::to_string(rank);
    ::mkdir(output_dir_.c_str(), 0755);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error("--output-filename: cannot create " + dir + ": " + std::strerror(errno));
  }
  for (int k = 0; k < 2; ++k) {
    auto s = std::make_unique<Stream>();
    s->rank = rank;
    s->is_stderr = k == 1;
    s->prefixed = prefixed;
    s->fd = std::move(ends[k][0]);
    if (!dir.empty()) {
      const std::string path = dir + (k == 1 ? "/stderr" : "/stdout");
      s->file = std::fopen(path.c_str(), "w");
      if (!s->file) throw std::runtime_error("--output-filename: cannot create " + path);
    }
    streams_.push_back(std::move(s));
  }
  return {std::move(ends[0][1]), std::move(ends[1][1])};
}

void OutputForwarder::emit(Stream& s, std::string_view line) {
  std::string out;
  if (!s.prefixed) out.append("[").append(std::to_string(s.rank)).append(s.is_stderr ? "]<stderr>:" : "]<stdout>:");
  out.append(line).push_back('\n');
  // One write per line: whole lines reach the terminal or pipe one after the other.
  const int fd = s.is_stderr ? 2 : 1;
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  std::FILE* file = s.file;
  if (s.prefixed && !output_dir_.empty()) {
    // "[3]<stdout>:text" from a host agent: rank 3's file gets "text". (A line without the
    // prefix is the agent's own, for the terminal only.)
    const auto close = line.find("]<std");
    if (!line.empty() && line[0] == '[' && close != std::string_view::npos && line.size() >= close + 10) {
      const int rank = std::atoi(std::string(line.substr(1, close - 1)).c_str());
      file = fileOf(rank, line.substr(close + 2, 6) == "stderr");
      line = line.substr(close + 10);
    }
  }
  if (file) {
    std::fwrite(line.data(), 1, line.size(), file);
    std::fputc('\n', file);
    std::fflush(file);
  }
}

void OutputForwarder::readFrom(Stream& s) {
  char buf[65536];
  while (s.fd.valid()) {
    const ssize_t n = ::read(s.fd.get(), buf, sizeof(buf));
    if (n > 0) {
      s.partial.append(buf, static_cast<size_t>(n));
      size_t start = 0, nl;
      while ((nl = s.partial.find('\n', start)) != std::string::npos) {
        emit(s, std::string_view(s.partial).substr(start, nl - start));
        start = nl + 1;
      }
      s.partial.erase(0, start);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 && errno == EINTR) continue;
    if (!s.partial.empty()) emit(s, s.partial);  // the last line had no newline
    s.partial.clear();
    s.fd.reset();  // end of file (or an error): the worker and its children closed it
  }
}

bool OutputForwarder::pump(std::chrono::milliseconds wait) {
  std::vector<pollfd> fds;
  std::vector<Stream*> which;
  for (auto& s : streams_) {
    if (!s->fd.valid()) continue;
    fds.push_back({s->fd.get(), POLLIN, 0});
    which.push_back(s.get());
  }
  if (fds.empty()) return false;
  const int n = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
  if (n <= 0) return true;  // timeout, or EINTR: a signal for the caller to look at
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents) readFrom(*which[i]);
  return true;
}

void OutputForwarder::drain(std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until && pump(std::chrono::milliseconds(20))) {
  }
}

}  // namespace hora::launcher
