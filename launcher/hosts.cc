#include "launcher/hosts.h"

#include <charconv>
#include <set>
#include <sstream>

#include "hora/errors.h"
#include "hora/identity.h"

namespace hora::launcher {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

int parseSlots(const std::string& text, const std::string& where) {
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1)
    throw InvalidArgumentError(where + ": slots must be a positive integer, got '" + text + "'");
  return n;
}

void checkHostName(const std::string& host, const std::string& where) {
  if (host.empty()) throw InvalidArgumentError(where + ": empty host name");
  for (char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'))
      throw InvalidArgumentError(where + ": '" + host + "' is not a host name or address");
}

// "host" or "host:N".
HostSlots parseEntry(const std::string& entry, const std::string& where) {
  HostSlots h;
  const auto colon = entry.rfind(':');
  h.host = entry.substr(0, colon);
  if (colon != std::string::npos) {
    h.slots = parseSlots(entry.substr(colon + 1), where);
    h.slots_given = true;
  }
  checkHostName(h.host, where);
  return h;
}

}  // namespace

std::vector<HostSlots> parseHostList(const std::string& spec) {
  std::vector<HostSlots> hosts;
  std::stringstream in(spec);
  std::string entry;
  while (std::getline(in, entry, ',')) hosts.push_back(parseEntry(trim(entry), "-H entry '" + entry + "'"));
  if (hosts.empty() || spec.back() == ',') throw InvalidArgumentError("-H '" + spec + "': expected host:slots,...");
  return hosts;
}

std::vector<HostSlots> parseHostfile(const std::string& text, const std::string& origin) {
  std::vector<HostSlots> hosts;
  std::stringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const std::string where = origin + " line " + std::to_string(number);
    std::stringstream words(line);
    std::string first, rest;
    words >> first;
    std::getline(words, rest);
    rest = trim(rest);
    if (rest.empty()) {
      hosts.push_back(parseEntry(first, where));
    } else if (rest.rfind("slots=", 0) == 0 && first.find(':') == std::string::npos) {
      checkHostName(first, where);
      hosts.push_back({first, parseSlots(trim(rest.substr(6)), where), true});
    } else {
      throw InvalidArgumentError(where + ": expected 'host slots=N' or 'host:N', got '" + line + "'");
    }
  }
  if (hosts.empty()) throw InvalidArgumentError(origin + ": no hosts");
  return hosts;
}

std::vector<Placement> placeRanks(const std::vector<HostSlots>& hosts, int np) {
  std::set<std::string> seen;
  int slots = 0;
  for (const auto& h : hosts) {
    if (!seen.insert(h.host).second) throw InvalidArgumentError("host '" + h.host + "' is listed twice");
    slots += h.slots;
  }
  if (np > slots)
    throw InvalidArgumentError("-np " + std::to_string(np) + " asks for more ranks than the " + std::to_string(slots) +
                               " slots of the hosts");
  std::vector<std::string> host_of;
  for (const auto& h : hosts)
    for (int s = 0; s < h.slots && static_cast<int>(host_of.size()) < np; ++s) host_of.push_back(h.host);
  std::vector<Placement> out;
  for (int r = 0; r < np; ++r) {
    Identity id;
    id.rank = r;
    id.size = np;
    id.deriveTopology(host_of);
    out.push_back({host_of[static_cast<size_t>(r)], r, id.local_rank, id.local_size, id.cross_rank, id.cross_size});
  }
  return out;
}

}  // namespace hora::launcher
