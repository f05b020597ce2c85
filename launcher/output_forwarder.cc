#include "launcher/output_forwarder.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace hora::launcher {

OutputForwarder::OutputForwarder(std::string output_dir, bool timestamp)
    : output_dir_(std::move(output_dir)), timestamp_(timestamp) {
  struct stat out {}, err {};
  same_sink_ = ::fstat(1, &out) == 0 && ::fstat(2, &err) == 0 && out.st_dev == err.st_dev && out.st_ino == err.st_ino;
}

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

void OutputForwarder::emit(Stream& s, std::string_view piece, char end) {
  std::FILE* file = s.file;
  std::string_view text = piece;  // what the rank wrote, without an agent's prefix
  std::string relabeled;          // an agent's piece with the prefix of the rank's label
  if (s.prefixed) {
    // "[3]<stdout>:text" from a host agent: rank 3's file gets "text". (A piece without the
    // prefix is the agent's own, for the terminal only.)
    const auto close = piece.find("]<std");
    file = nullptr;
    if (!piece.empty() && piece[0] == '[' && close != std::string_view::npos && piece.size() >= close + 10) {
      if (!output_dir_.empty())
        file = fileOf(std::atoi(std::string(piece.substr(1, close - 1)).c_str()), piece.substr(close + 2, 6) == "stderr");
      text = piece.substr(close + 10);
      auto label = labels_.find(std::atoi(std::string(piece.substr(1, close - 1)).c_str()));
      if (label != labels_.end()) relabeled = "[" + label->second + std::string(piece.substr(close));
    }
  }
  if (file) {
    std::fwrite(text.data(), 1, text.size(), file);
    if (end) std::fputc(end, file);
    std::fflush(file);
  }
  const Stream*& showing = showing_cr_[sinkOf(s)];
  std::string out;
  if (showing && showing != &s) out.push_back('\n');  // keep the other rank's bar on its line
  if (piece.empty() && showing == &s && end == '\n') {
    out.push_back('\n');  // "\r\n": the bar stays as drawn
  } else {
    if (timestamp_) {
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      char stamp[64];
      out.append(stamp, std::strftime(stamp, sizeof(stamp), "%a %b %e %H:%M:%S %Y", ::localtime_r(&now, &local)));
    }
    if (!s.prefixed) out.append("[").append(labelOf(s.rank)).append(s.is_stderr ? "]<stderr>:" : "]<stdout>:");
    out.append(relabeled.empty() ? piece : std::string_view(relabeled)).push_back(end ? end : '\n');
  }
  showing = end == '\r' ? &s : nullptr;
  // One write per piece: whole pieces reach the terminal or pipe one after the other.
  const int fd = s.is_stderr ? 2 : 1;
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

void OutputForwarder::readFrom(Stream& s) {
  char buf[65536];
  while (s.fd.valid()) {
    const ssize_t n = ::read(s.fd.get(), buf, sizeof(buf));
    if (n > 0) {
      s.partial.append(buf, static_cast<size_t>(n));
      size_t start = 0, end;
      while ((end = s.partial.find_first_of("\r\n", start)) != std::string::npos) {
        const char terminator = s.partial[end];
        // An empty piece before a "\r" (tqdm starts every redraw with one) shows nothing.
        if (terminator == '\r' && end == start) {
          if (s.file) std::fputc('\r', s.file);
        } else {
          emit(s, std::string_view(s.partial).substr(start, end - start), terminator);
        }
        s.after_cr = terminator == '\r';
        start = end + 1;
      }
      s.partial.erase(0, start);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Nothing more for now: a redraw after "\r" goes out as it stands (Note [carriage returns]).
      if (s.after_cr && !s.partial.empty()) {
        if (s.file) std::fwrite(s.partial.data(), 1, s.partial.size(), s.file);
        FILE* file = s.file;
        s.file = nullptr;  // the bytes went to the file just above, without the "\r" added here
        emit(s, s.partial, '\r');
        s.file = file;
        if (s.file) std::fflush(s.file);
        s.partial.clear();
      }
      return;
    }
    if (n < 0 && errno == EINTR) continue;
    if (!s.partial.empty()) emit(s, s.partial, 0);  // the last line had no newline
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
