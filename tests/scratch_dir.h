// A private directory under /tmp for one test's files (logs, dumps, FIFOs), removed with everything
// in it when the test leaves its scope, also when a REQUIRE throws: tests leave nothing behind.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace braidtest {

class ScratchDir {
 public:
  // tag names the directory (/tmp/braid-<tag>-XXXXXX), so a leftover says which test made it.
  explicit ScratchDir(const std::string& tag) {
    std::string tmpl = "/tmp/braid-" + tag + "-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl + " failed");
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;  // a destructor must not throw; a failed removal only leaves the directory
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace braidtest
