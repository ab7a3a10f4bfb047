// Runs a fuzz target's LLVMFuzzerTestOneInput on every file of the corpus directories (or files)
// named on the command line, without libFuzzer: the `fuzz-corpus` test re-checks the committed
// corpus with the normal build. Exits non-zero when a path is unreadable or a directory is empty.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool replayFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return false;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A copy of exactly the input's size, so that reading past it is caught under a sanitizer.
  std::vector<uint8_t> exact(bytes);
  LLVMFuzzerTestOneInput(exact.empty() ? nullptr : exact.data(), exact.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  size_t count = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      ok = false;
      continue;
    }
    std::vector<std::string> files;
    if (S_ISDIR(st.st_mode)) {
      DIR* d = opendir(argv[i]);
      for (dirent* e = d != nullptr ? readdir(d) : nullptr; e != nullptr; e = readdir(d))
        if (e->d_name[0] != '.') files.push_back(std::string(argv[i]) + "/" + e->d_name);
      if (d != nullptr) closedir(d);
      std::sort(files.begin(), files.end());
      if (files.empty()) {
        fprintf(stderr, "replay: %s is empty\n", argv[i]);
        ok = false;
      }
    } else {
      files.push_back(argv[i]);
    }
    for (const std::string& f : files) {
      ok = replayFile(f) && ok;
      ++count;
    }
  }
  printf("%s: %zu inputs replayed%s\n", argv[0], count, ok ? "" : " (with errors)");
  return ok ? 0 : 1;
}
