#include "common/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "hora/errors.h"

namespace hora::common {

std::pair<std::string, void*> createSegment(size_t bytes) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string name = "/hora." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) throw InternalError("shm_open(" + name + ") failed: " + std::strerror(errno));
    void* p = MAP_FAILED;
    if (::ftruncate(fd, static_cast<off_t>(bytes)) == 0)
      p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    const int error = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      ::shm_unlink(name.c_str());
      throw InternalError("cannot make a shared-memory segment of " + std::to_string(bytes) + " bytes (" + name +
                          "): " + std::strerror(error) + " (is /dev/shm full?)");
    }
    return {name, p};
  }
  throw InternalError("cannot find a free shared-memory segment name");
}

void* mapSegment(const std::string& name, size_t bytes, int peer) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    throw PeerError("cannot open rank " + std::to_string(peer) + "'s shared-memory segment " + name + ": " +
                    std::strerror(errno) + " (is it on another host, or in another /dev/shm? HORA_TRANSPORT=tcp)");
  }
  struct stat st {};
  void* p = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == bytes)
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    throw PeerError("cannot map rank " + std::to_string(peer) + "'s shared-memory segment " + name +
                    " (size " + std::to_string(st.st_size) + ", expected " + std::to_string(bytes) + ")");
  }
  return p;
}

}  // namespace hora::common
