#include "bootstrap/job/pmi_wire_kvs.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "hora/errors.h"

// Note [PMI-1 wire protocol]: the client writes one line per command and reads one line back:
//   cmd=init pmi_version=1 pmi_subversion=1      -> cmd=response_to_init ... rc=0
//   cmd=get_maxes                                -> cmd=maxes kvsname_max= keylen_max= vallen_max=
//   cmd=get_my_kvsname                           -> cmd=my_kvsname kvsname=...
//   cmd=put kvsname=K key=k value=v              -> cmd=put_result rc=0
//   cmd=barrier_in                               -> cmd=barrier_out      (when every rank is in)
//   cmd=get kvsname=K key=k                      -> cmd=get_result rc=0 value=v
//   cmd=finalize                                 -> cmd=finalize_ack
// Words are separated by spaces and split at their first '=', so keys and values must hold
// neither spaces nor '='; what hora puts is digits, hex and [.:,] only.

namespace hora::bootstrap {
namespace {

constexpr const char* kWho = "MPICH's process manager (PMI_FD)";

void checkWord(const std::string& what, const std::string& s, size_t max) {
  if (s.empty() || s.size() > max || s.find_first_of(" =\n") != std::string::npos)
    throw InvalidArgumentError("PMI-1 " + what + " '" + s + "' is empty, longer than " + std::to_string(max) +
                               " or holds a space, '=' or newline");
}

}  // namespace

PmiWireKvs::Words PmiWireKvs::parse(const std::string& line) {
  Words words;
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq == std::string::npos) words[word] = "";
    else words[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return words;
}

PmiWireKvs::PmiWireKvs(int fd, const common::Deadline& deadline) : fd_(::dup(fd)) {
  if (!fd_.valid())
    throw InvalidArgumentError(std::string("PMI_FD=") + std::to_string(fd) + " is not an open file descriptor (" +
                               std::strerror(errno) + ")");
  // Non-blocking for reads bounded by a deadline; a dup shares the file description, so the
  // destructor clears the flag again.
  common::setNonBlocking(fd_.get());
  call("cmd=init pmi_version=1 pmi_subversion=1", "response_to_init", deadline);
  const Words maxes = call("cmd=get_maxes", "maxes", deadline);
  max_key_ = std::stoul(maxes.count("keylen_max") ? maxes.at("keylen_max") : "32");
  max_value_ = std::stoul(maxes.count("vallen_max") ? maxes.at("vallen_max") : "64");
  kvsname_ = call("cmd=get_my_kvsname", "my_kvsname", deadline)["kvsname"];
  if (kvsname_.empty()) throw PeerError(std::string(kWho) + " named no key-value space");
}

PmiWireKvs::~PmiWireKvs() {
  try {
    call("cmd=finalize", "finalize_ack", common::Deadline::after(std::chrono::seconds(2)));
  } catch (const std::exception&) {
    // Leaving anyway: the process manager notices the closed socket.
  }
  const int flags = ::fcntl(fd_.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd_.get(), F_SETFL, flags & ~O_NONBLOCK);
}

std::string PmiWireKvs::readLine(const common::Deadline& deadline) {
  for (;;) {
    if (const auto nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    pollfd p{fd_.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(deadline.remaining().count(), 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) throw TimeoutError(std::string(kWho) + " did not answer in time");
    char buf[1024];
    const ssize_t n = ::read(fd_.get(), buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) throw PeerError(std::string(kWho) + " closed the connection" + (n < 0 ? std::string(": ") + std::strerror(errno) : ""));
    buffered_.append(buf, static_cast<size_t>(n));
  }
}

PmiWireKvs::Words PmiWireKvs::call(const std::string& line, const std::string& reply,
                                   const common::Deadline& deadline) {
  const std::string out = line + "\n";
  common::writeFull(fd_.get(), out.data(), out.size(), deadline, kWho);
  Words words = parse(readLine(deadline));
  if (words["cmd"] != reply)
    throw PeerError(std::string(kWho) + " answered '" + line.substr(0, line.find(' ')) + "' with cmd=" + words["cmd"] +
                    " (expected " + reply + ")");
  if (words.count("rc") && words["rc"] != "0")
    throw PeerError(std::string(kWho) + " refused '" + line.substr(0, line.find(' ')) + "': rc=" + words["rc"] +
                    (words.count("msg") ? " " + words["msg"] : ""));
  return words;
}

void PmiWireKvs::put(const std::string& key, const std::string& value, const common::Deadline& deadline) {
  checkWord("key", key, max_key_);
  checkWord("value", value, max_value_);
  call("cmd=put kvsname=" + kvsname_ + " key=" + key + " value=" + value, "put_result", deadline);
}

void PmiWireKvs::fence(const common::Deadline& deadline) { call("cmd=barrier_in", "barrier_out", deadline); }

std::string PmiWireKvs::get(int /*rank*/, const std::string& key, const common::Deadline& deadline) {
  // PMI-1 keys are global to the job's key-value space: the caller's key names the rank.
  checkWord("key", key, max_key_);
  return call("cmd=get kvsname=" + kvsname_ + " key=" + key, "get_result", deadline)["value"];
}

}  // namespace hora::bootstrap
