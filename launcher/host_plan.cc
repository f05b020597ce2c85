#include "launcher/host_plan.h"

#include <cstdlib>

#include "hora/errors.h"

namespace hora::launcher {
namespace {

constexpr const char* kMagic = "hora-host-plan/1";

void put(std::string& out, const std::string& field) { out.append(std::to_string(field.size())).append(":").append(field); }

class Reader {
 public:
  explicit Reader(const std::string& text) : text_(text) {}
  std::string next() {
    const auto colon = text_.find(':', at_);
    if (colon == std::string::npos || colon == at_ || colon - at_ > 12 ||
        text_.find_first_not_of("0123456789", at_) < colon)
      throw InvalidArgumentError("host plan: malformed field at byte " + std::to_string(at_));
    const size_t n = std::stoul(text_.substr(at_, colon - at_));
    if (colon + 1 + n > text_.size()) throw InvalidArgumentError("host plan: truncated at byte " + std::to_string(at_));
    std::string field = text_.substr(colon + 1, n);
    at_ = colon + 1 + n;
    return field;
  }
  int number() {
    const std::string s = next();
    char* end = nullptr;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < 0 || v > (1 << 30)) throw InvalidArgumentError("host plan: bad number '" + s + "'");
    return static_cast<int>(v);
  }
  bool done() const { return at_ == text_.size(); }

 private:
  const std::string& text_;
  size_t at_ = 0;
};

}  // namespace

std::string encodeHostPlan(const HostPlan& plan) {
  std::string body;
  put(body, kMagic);
  put(body, plan.host);
  put(body, std::to_string(plan.grace_ms));
  put(body, std::to_string(plan.command.size()));
  for (const auto& c : plan.command) put(body, c);
  put(body, std::to_string(plan.ranks.size()));
  for (const auto& r : plan.ranks) {
    put(body, std::to_string(r.rank));
    put(body, std::to_string(r.env.size()));
    for (const auto& [k, v] : r.env) {
      put(body, k);
      put(body, v);
    }
  }
  std::string out;
  put(out, body);
  return out;
}

HostPlan decodeHostPlan(const std::string& text) {
  Reader outer(text);
  const std::string body = outer.next();  // the whole plan, as one field: a reader knows its end
  if (!outer.done()) throw InvalidArgumentError("host plan: trailing bytes");
  Reader in(body);
  if (in.next() != kMagic) throw InvalidArgumentError("host plan: not a hora host plan (another horarun version?)");
  HostPlan plan;
  plan.host = in.next();
  plan.grace_ms = in.number();
  for (int n = in.number(); n > 0; --n) plan.command.push_back(in.next());
  for (int n = in.number(); n > 0; --n) {
    HostPlan::Rank r;
    r.rank = in.number();
    for (int k = in.number(); k > 0; --k) {
      std::string name = in.next();
      r.env[name] = in.next();
    }
    plan.ranks.push_back(std::move(r));
  }
  if (!in.done() || plan.command.empty() || plan.ranks.empty())
    throw InvalidArgumentError("host plan: trailing bytes, no command or no ranks");
  return plan;
}

}  // namespace hora::launcher
