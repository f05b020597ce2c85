// The launcher's environment as every rank gets it, as horovodrun forwards it: every variable a
// POSIX shell can export, except those that describe this host or this login rather than the
// job (kept out so that a remote rank keeps its own), and those horarun sets for each rank.
//
// Local ranks inherit horarun's environment whole (they run on this host); remote ranks get
// forwardedEnvironment() in their host agent's plan (host_plan.h, on the agent's stdin), beneath
// horarun's own variables (knobs, -x, identity), which win. HORA_SECRET is set per rank, never
// forwarded from horarun's own environment.
// Note [forwarded environment]: the list above is horovodrun's, less HOME/USER/LOGNAME/SHELL
// (a different ssh user would get the wrong paths).
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace hora::launcher {

// Why `name` is not forwarded to remote ranks, or "" when it is. The reasons, in order:
// not a shell name; host or login specific (HOSTNAME, HOME, SSH_*, DISPLAY, XDG_*, ...); shell
// internals (PWD, OLDPWD, SHLVL, _, BASH_FUNC_*); set by horarun for each rank (HORA_RANK, ...,
// HORA_SECRET, and their HOROVOD_* names); CUDA_VISIBLE_DEVICES (per host, as horovodrun).
std::string notForwarded(std::string_view name);

// The variables of `environ` (NAME=value strings, null-terminated) that notForwarded() lets
// through.
std::map<std::string, std::string> forwardedEnvironment(char** environ);

}  // namespace hora::launcher
