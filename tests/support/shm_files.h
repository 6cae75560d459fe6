// What is in /dev/shm, for tests that check that loom leaves nothing behind.
#pragma once

#include <dirent.h>

#include <cstring>
#include <string>
#include <vector>

namespace loom::testing {

// The names in /dev/shm (without the leading '/') that start with prefix.
inline std::vector<std::string> shmFiles(const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

}  // namespace loom::testing
