#include "bootstrap/job/pmix_kvs.h"

#include "hora/errors.h"

#ifdef HORA_HAVE_PMIX
#include <dlfcn.h>
#include <pmix.h>

#include <cstdlib>
#include <cstring>
#endif

namespace hora::bootstrap {

#ifndef HORA_HAVE_PMIX

std::unique_ptr<LauncherKvs> openPmixKvs(const common::Deadline&) {
  throw InvalidArgumentError("this hora was built without PMIx's headers (Debian: libpmix-dev), so it cannot "
                             "ask OpenMPI's runtime where rank 0 is");
}

#else

namespace {

constexpr const char* kLibrary = "libpmix.so.2";

// The few PMIx calls hora makes, looked up in the loaded library.
struct PmixApi {
  decltype(&PMIx_Init) init;
  decltype(&PMIx_Finalize) finalize;
  decltype(&PMIx_Put) put;
  decltype(&PMIx_Commit) commit;
  decltype(&PMIx_Fence) fence;
  decltype(&PMIx_Get) get;
  decltype(&PMIx_Error_string) error_string;
};

template <typename F>
void bind(void* library, const char* symbol, F& into) {
  into = reinterpret_cast<F>(::dlsym(library, symbol));
  if (!into) throw InvalidArgumentError(std::string(kLibrary) + " has no " + symbol);
}

// PMIX_TIMEOUT in whole seconds (at least 1: 0 would mean forever).
pmix_info_t timeoutInfo(const common::Deadline& deadline) {
  pmix_info_t info;
  std::memset(&info, 0, sizeof(info));
  std::strncpy(info.key, PMIX_TIMEOUT, PMIX_MAX_KEYLEN);
  info.value.type = PMIX_INT;
  info.value.data.integer = static_cast<int>(std::max<int64_t>(1, (deadline.remaining().count() + 999) / 1000));
  return info;
}

class PmixKvs : public LauncherKvs {
 public:
  explicit PmixKvs(void* library) : library_(library) {
    bind(library_, "PMIx_Init", api_.init);
    bind(library_, "PMIx_Finalize", api_.finalize);
    bind(library_, "PMIx_Put", api_.put);
    bind(library_, "PMIx_Commit", api_.commit);
    bind(library_, "PMIx_Fence", api_.fence);
    bind(library_, "PMIx_Get", api_.get);
    bind(library_, "PMIx_Error_string", api_.error_string);
    std::memset(&me_, 0, sizeof(me_));
    check("PMIx_Init", api_.init(&me_, nullptr, 0));
    initialized_ = true;
  }

  ~PmixKvs() override {
    // Finalized, so that OpenMPI's mpirun sees a process that left properly. The library stays
    // loaded: its threads may still be winding down.
    if (initialized_) api_.finalize(nullptr, 0);
  }

  std::string name() const override { return "OpenMPI's runtime (PMIx)"; }

  void put(const std::string& key, const std::string& value, const common::Deadline&) override {
    pmix_value_t v;
    std::memset(&v, 0, sizeof(v));
    v.type = PMIX_STRING;
    v.data.string = const_cast<char*>(value.c_str());  // PMIx_Put copies it
    check("PMIx_Put", api_.put(PMIX_GLOBAL, key.c_str(), &v));
    check("PMIx_Commit", api_.commit());
  }

  void fence(const common::Deadline& deadline) override {
    pmix_info_t info[2];
    info[0] = timeoutInfo(deadline);
    std::memset(&info[1], 0, sizeof(info[1]));
    std::strncpy(info[1].key, PMIX_COLLECT_DATA, PMIX_MAX_KEYLEN);
    info[1].value.type = PMIX_BOOL;
    info[1].value.data.flag = true;
    pmix_proc_t everyone = me_;
    everyone.rank = PMIX_RANK_WILDCARD;
    check("PMIx_Fence", api_.fence(&everyone, 1, info, 2));
  }

  std::string get(int rank, const std::string& key, const common::Deadline& deadline) override {
    pmix_proc_t of = me_;
    of.rank = static_cast<pmix_rank_t>(rank);
    pmix_info_t info = timeoutInfo(deadline);
    pmix_value_t* value = nullptr;
    check("PMIx_Get of " + key, api_.get(&of, key.c_str(), &info, 1, &value));
    std::string out;
    if (value && value->type == PMIX_STRING && value->data.string) out = value->data.string;
    // Allocated by libpmix with malloc (PMIX_VALUE_RELEASE would call into the library by name).
    if (value && value->type == PMIX_STRING) std::free(value->data.string);
    std::free(value);
    if (out.empty()) throw PeerError(name() + " gave no text for key " + key + " of rank " + std::to_string(rank));
    return out;
  }

 private:
  void check(const std::string& what, pmix_status_t status) {
    if (status == PMIX_SUCCESS) return;
    const std::string why = what + " failed: " + api_.error_string(status) + " (" + std::to_string(status) + ")";
    if (status == PMIX_ERR_TIMEOUT) throw TimeoutError(name() + ": " + why);
    throw PeerError(name() + ": " + why);
  }

  void* library_;
  PmixApi api_{};
  pmix_proc_t me_;
  bool initialized_ = false;
};

}  // namespace

std::unique_ptr<LauncherKvs> openPmixKvs(const common::Deadline&) {
  // RTLD_GLOBAL: libpmix loads its own plugins, which look for its symbols there.
  void* library = ::dlopen(kLibrary, RTLD_NOW | RTLD_GLOBAL);
  if (!library) throw InvalidArgumentError(std::string("cannot load ") + kLibrary + " (" + ::dlerror() + ")");
  return std::make_unique<PmixKvs>(library);
}

#endif

}  // namespace hora::bootstrap
