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

namespace {

// "a[1-3,7]b" -> a1b a2b a3b a7b, zero padding kept ("[01-03]" -> 01 02 03).
std::vector<std::string> expandBrackets(const std::string& item) {
  const auto open = item.find('[');
  if (open == std::string::npos) return {item};
  const auto close = item.find(']', open);
  if (close == std::string::npos) throw InvalidArgumentError("SLURM_JOB_NODELIST: unclosed '[' in '" + item + "'");
  const std::string head = item.substr(0, open);
  std::vector<std::string> out;
  for (const auto& tail : expandBrackets(item.substr(close + 1))) {
    std::stringstream ranges(item.substr(open + 1, close - open - 1));
    for (std::string range; std::getline(ranges, range, ',');) {
      const auto dash = range.find('-');
      const std::string first = range.substr(0, dash);
      const std::string last = dash == std::string::npos ? first : range.substr(dash + 1);
      const auto number = [&](const std::string& t) {
        if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos)
          throw InvalidArgumentError("SLURM_JOB_NODELIST: '" + item + "' is not a Slurm host list");
        return std::stoi(t);
      };
      const int from = number(first), to = number(last);
      for (int n = from; n <= to; ++n) {
        std::string digits = std::to_string(n);
        if (digits.size() < first.size()) digits.insert(0, first.size() - digits.size(), '0');
        out.push_back(head + digits + tail);
      }
    }
  }
  return out;
}

}  // namespace

std::vector<HostSlots> slurmAllocationHosts(const std::string& nodelist, const std::string& tasks) {
  std::vector<std::string> hosts;
  // Split at the commas outside brackets.
  int depth = 0;
  std::string item;
  for (char c : nodelist + ",") {
    if (c == ',' && depth == 0) {
      if (!item.empty())
        for (auto& h : expandBrackets(item)) hosts.push_back(std::move(h));
      item.clear();
      continue;
    }
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    item += c;
  }
  if (depth != 0) throw InvalidArgumentError("SLURM_JOB_NODELIST: unclosed '[' in '" + nodelist + "'");
  std::vector<int> slots;
  std::stringstream counts(tasks);
  for (std::string count; std::getline(counts, count, ',');) {
    // "2(x3)": 2, three times.
    const auto x = count.find("(x");
    const int n = parseSlots(count.substr(0, x), "SLURM_TASKS_PER_NODE");
    const int times = x == std::string::npos ? 1 : parseSlots(count.substr(x + 2, count.size() - x - 3), "SLURM_TASKS_PER_NODE");
    slots.insert(slots.end(), static_cast<size_t>(times), n);
  }
  if (hosts.empty() || slots.size() != hosts.size())
    throw InvalidArgumentError("SLURM_JOB_NODELIST='" + nodelist + "' names " + std::to_string(hosts.size()) +
                               " host(s) but SLURM_TASKS_PER_NODE='" + tasks + "' gives slots for " +
                               std::to_string(slots.size()));
  std::vector<HostSlots> out;
  for (size_t i = 0; i < hosts.size(); ++i) {
    checkHostName(hosts[i], "SLURM_JOB_NODELIST");
    out.push_back({hosts[i], slots[i]});
  }
  return out;
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
    out.push_back({host_of[static_cast<size_t>(r)], r, id.local_rank, id.local_size, id.cross_rank, id.cross_size, np});
  }
  return out;
}

}  // namespace hora::launcher
