#include "rendezvous/tcp_store.h"

#include <cstring>

#include "hora/errors.h"

namespace hora::rendezvous {
namespace {
int64_t timeoutArg(const common::Deadline& d) { return d.remaining().count(); }
}  // namespace

TcpStore::TcpStore(const std::string& host, int port, std::string secret,
                   const common::Deadline& deadline)
    : what_("rendezvous store at " + host + ":" + std::to_string(port)), secret_(std::move(secret)) {
  fd_ = common::connectTcp(host, port, deadline, "the rendezvous store");
  uint8_t hello[wire::kHelloBytes];
  common::readFull(fd_.get(), hello, sizeof(hello), deadline, what_);
  uint32_t magic;
  std::memcpy(&magic, hello, 4);
  if (magic != wire::kHelloMagic)
    throw PeerError(what_ + " is not a hora rendezvous store (bad greeting)");
  std::memcpy(challenge_.data(), hello + 4, challenge_.size());
}

std::string TcpStore::localHost() const { return common::localAddress(fd_.get()).host; }

wire::Response TcpStore::call(wire::Request request, const common::Deadline& deadline) {
  std::lock_guard lock(mutex_);
  if (!fd_.valid()) throw PeerError("connection to " + what_ + " is closed after an earlier error");
  // A get or wait blocks in the server until the request's own deadline; allow it one more
  // second to say so. Any other request is answered at once: its deadline is the caller's, so
  // that a store behind a cut link costs a failure report no more than its grace.
  const bool blocks = request.op == wire::Op::kGet || request.op == wire::Op::kWait;
  const auto io_deadline =
      blocks ? common::Deadline::after(deadline.remaining() + std::chrono::seconds(1)) : deadline;
  try {
    const auto frame = wire::encodeRequest(request, secret_, challenge_, seq_);
    common::writeFull(fd_.get(), frame.data(), frame.size(), io_deadline, what_);
    std::vector<uint8_t> in(wire::kFrameHeaderBytes);
    common::readFull(fd_.get(), in.data(), in.size(), io_deadline, what_);
    uint32_t len;
    std::memcpy(&len, in.data() + 4, 4);
    if (len > wire::kMaxBodyBytes) throw PeerError(what_ + " sent an oversized response");
    in.resize(wire::kFrameHeaderBytes + len + common::kMacBytes);
    common::readFull(fd_.get(), in.data() + wire::kFrameHeaderBytes,
                     in.size() - wire::kFrameHeaderBytes, io_deadline, what_);
    auto decoded = wire::decodeResponse(in, secret_, challenge_, seq_);
    ++seq_;
    if (auto* refused = std::get_if<wire::Refused>(&decoded)) {
      fd_.reset();
      throw AuthenticationError(what_ + " refused the request or sent an unverifiable answer (" +
                                refused->reason + "); is HORA_SECRET the job's secret?");
    }
    auto response = std::get<wire::Decoded<wire::Response>>(std::move(decoded)).message;
    if (response.status == wire::Status::kError) {
      fd_.reset();
      throw PeerError(what_ + ": " + response.value);
    }
    return response;
  } catch (const Error&) {
    fd_.reset();  // the stream may hold half a frame: never reuse it
    throw;
  }
}

void TcpStore::set(const std::string& key, const std::string& value, const common::Deadline& d) {
  call({wire::Op::kSet, 0, {key}, value}, d);
}

std::string TcpStore::get(const std::string& key, const common::Deadline& d) {
  auto r = call({wire::Op::kGet, timeoutArg(d), {key}, {}}, d);
  if (r.status == wire::Status::kTimeout)
    throw TimeoutError("timed out after " + std::to_string(d.timeout().count()) +
                       " ms waiting for key '" + key + "' in the " + what_);
  return r.value;
}

std::optional<std::string> TcpStore::tryGet(const std::string& key, const common::Deadline& d) {
  auto r = call({wire::Op::kTryGet, 0, {key}, {}}, d);
  if (r.status == wire::Status::kNotFound) return std::nullopt;
  return r.value;
}

int64_t TcpStore::add(const std::string& key, int64_t delta, const common::Deadline& d) {
  return call({wire::Op::kAdd, delta, {key}, {}}, d).number;
}

void TcpStore::wait(const std::vector<std::string>& keys, const common::Deadline& d) {
  auto r = call({wire::Op::kWait, timeoutArg(d), keys, {}}, d);
  if (r.status == wire::Status::kTimeout)
    throw TimeoutError("timed out after " + std::to_string(d.timeout().count()) +
                       " ms waiting for keys [" + r.value + "] in the " + what_);
}

}  // namespace hora::rendezvous
