// A temporary directory for one test, removed (with its contents) when the object goes away.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace loom::testing {

class TempDir {
 public:
  // /tmp/loom-<name>-<pid>, emptied first in case a crashed run left it behind.
  explicit TempDir(const std::string& name)
      : path_((std::filesystem::temp_directory_path() /
               ("loom-" + name + "-" + std::to_string(getpid())))
                  .string()) {
    std::filesystem::remove_all(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace loom::testing
