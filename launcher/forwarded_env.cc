#include "launcher/forwarded_env.h"

#include "common/knobs.h"

namespace hora::launcher {
namespace {

bool isShellName(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name)
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) return false;
  return true;
}

bool startsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// What a login on the remote host sets for itself (its user, its home, its terminal session):
// forwarding ours would point remote ranks at paths and sockets that exist only here.
constexpr std::string_view kHostSpecific[] = {
    "HOSTNAME", "HOST", "HOME", "USER", "LOGNAME", "MAIL", "SHELL", "DISPLAY", "XAUTHORITY", "WINDOWID",
    "TMUX", "TMUX_PANE", "STY", "TERMCAP", "DBUS_SESSION_BUS_ADDRESS", "COLUMNS", "LINES"};
constexpr std::string_view kHostSpecificPrefixes[] = {"SSH_", "XDG_", "SUDO_", "KRB5CC"};
constexpr std::string_view kShellInternals[] = {"PWD", "OLDPWD", "SHLVL", "_", "PS1", "PS2", "PS4", "IFS"};

}  // namespace

std::string notForwarded(std::string_view name) {
  if (!isShellName(name)) return "not a name a shell can export";
  for (auto n : kHostSpecific)
    if (name == n) return "specific to this host or login";
  for (auto p : kHostSpecificPrefixes)
    if (startsWith(name, p)) return "specific to this host or login";
  for (auto n : kShellInternals)
    if (name == n) return "shell internals";
  if (startsWith(name, "BASH_FUNC_")) return "shell internals";
  if (name.size() >= 20 && name.substr(name.size() - 20) == "CUDA_VISIBLE_DEVICES") return "chosen per host";
  if (name == "HOROVOD_SECRET_KEY") return "set by horarun for each rank";
  if (const common::KnobSpec* k = common::findKnob(name); k && k->group == common::KnobGroup::kLauncherSet)
    return "set by horarun for each rank";
  return "";
}

std::map<std::string, std::string> forwardedEnvironment(char** environ) {
  std::map<std::string, std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = entry.substr(0, eq);
    if (notForwarded(name).empty()) out.emplace(name, entry.substr(eq + 1));
  }
  return out;
}

}  // namespace hora::launcher
