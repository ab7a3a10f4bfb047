// The settings table and its parsers: every knob has a range that its reader enforces, integers and
// sizes that overflow are refused instead of wrapping, booleans take the usual spellings and refuse
// the rest, and checkParams() names the variable and what it accepts.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <string>

#include "src/base/config.h"
#include "src/cuda/runtime.h"
#include "tests/scratch_dir.h"
#include "topology/topology.h"

namespace braid {
namespace {

// Sets (or, with nullptr, unsets) one variable for the scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    hadOld_ = old != nullptr;
    if (hadOld_) old_ = old;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (hadOld_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  bool hadOld_ = false;
  std::string old_;
};

bool mentions(const Status& s, const char* a, const char* b = "") {
  return s.message().find(a) != std::string::npos && s.message().find(b) != std::string::npos;
}

}  // namespace

TEST_CASE("every declared knob has a range that accepts its default", "[unit][config]") {
  for (const ParamInfo& p : allParams()) {
    INFO(p.name << " = '" << p.defaultValue << "'");
    if (p.kind != ParamKind::kString) CHECK_FALSE(paramRange(p).empty());
    if (p.defaultValue[0] == '\0') continue;
    ScopedEnv env(p.name, p.defaultValue);
    Status s = checkParam(p.name);
    INFO(s.message());
    CHECK(s.ok());
  }
}

TEST_CASE("integer settings out of range or overflowing name the variable and the range", "[unit][config]") {
  int64_t v = 0;
  {
    // ms x 1e6 wrapped to a negative heartbeat period: a healthy job failed at its first op.
    ScopedEnv env("BRAID_HEARTBEAT_MS", "9223372036854775807");
    Status s = paramInt("BRAID_HEARTBEAT_MS", &v);
    INFO(s.message());
    CHECK(s.code() == braidInvalidArgument);
    CHECK(mentions(s, "BRAID_HEARTBEAT_MS=9223372036854775807", "0 or 1..3600000"));
  }
  {
    ScopedEnv env("BRAID_HEARTBEAT_MS", "99999999999999999999");  // past int64: strtoll's ERANGE
    CHECK(paramInt("BRAID_HEARTBEAT_MS", &v).code() == braidInvalidArgument);
  }
  for (const char* ok : {"0", "1", "3600000"}) {
    ScopedEnv env("BRAID_HEARTBEAT_MS", ok);
    CHECK(paramInt("BRAID_HEARTBEAT_MS", &v).ok());
    CHECK(v == atoll(ok));
  }
  {
    ScopedEnv env("BRAID_HEARTBEAT_MISSES", "4611686018427387904");
    Status s = paramInt("BRAID_HEARTBEAT_MISSES", &v);
    CHECK(mentions(s, "BRAID_HEARTBEAT_MISSES", "1..1000"));
  }
  {
    // Seconds x 1e9 past INT64_MAX made every deadline already expired.
    ScopedEnv env("BRAID_TIMEOUT", "99999999999");
    Status s = paramInt("BRAID_TIMEOUT", &v);
    CHECK(mentions(s, "BRAID_TIMEOUT=99999999999", "1..315360000"));
  }
  for (const char* bad : {"0", "-5", "12abc", "soon"}) {
    ScopedEnv env("BRAID_TIMEOUT", bad);
    INFO(bad);
    CHECK(mentions(paramInt("BRAID_TIMEOUT", &v), "BRAID_TIMEOUT", "1..315360000"));
  }
}

TEST_CASE("BRAID_CUDA_DEVICE out of range fails init naming it; without a device, choosing one says why",
          "[unit][config][memtype]") {
  for (const char* bad : {"-1", "1024", "gpu0"}) {
    ScopedEnv env("BRAID_CUDA_DEVICE", bad);
    INFO(bad);
    Status s = checkParams();
    CHECK(s.code() == braidInvalidArgument);
    CHECK(mentions(s, "BRAID_CUDA_DEVICE", "0..1023"));
  }
  {
    ScopedEnv env("BRAID_CUDA_DEVICE", "3");
    CHECK(checkParams().ok());
    int device = -7;
    Status s = gpuCommDevice(&device);
    if (gpuDeviceCount() == 0) {
      // Here (no GPU, or no CUDA compiled in): refused, saying why, and *device untouched.
      CHECK(s.code() == braidInvalidUsage);
      CHECK(s.message() == gpuAbsentReason());
      CHECK(device == -7);
    } else if (gpuDeviceCount() <= 3) {
      CHECK(mentions(s, "BRAID_CUDA_DEVICE=3", "device"));
    } else {
      CHECK(s.ok());
      CHECK(device == 3);
    }
  }
}

TEST_CASE("size settings detect overflow of the suffix and keep to their range", "[unit][config]") {
  size_t v = 0;
  {
    // 18014398509482240 x 1024 = 2^64 + 256K: a signed multiply wrapped it to 256K.
    ScopedEnv env("BRAID_SHM_SLOT_SIZE", "18014398509482240K");
    Status s = paramSize("BRAID_SHM_SLOT_SIZE", &v);
    INFO(s.message());
    CHECK(s.code() == braidInvalidArgument);
    CHECK(mentions(s, "BRAID_SHM_SLOT_SIZE=18014398509482240K", "64..64M"));
  }
  for (const char* bad : {"1G", "9223372036854775807G", "-1K", "0", "12Q", "K"}) {
    ScopedEnv env("BRAID_SHM_SLOT_SIZE", bad);
    INFO(bad);
    CHECK(paramSize("BRAID_SHM_SLOT_SIZE", &v).code() == braidInvalidArgument);
  }
  {
    ScopedEnv env("BRAID_SHM_SLOT_SIZE", "64m");
    REQUIRE(paramSize("BRAID_SHM_SLOT_SIZE", &v).ok());
    CHECK(v == size_t{64} << 20);
  }
  {
    // 1 byte of socket buffer made two 256 KiB collectives take 35 s; 0 keeps the kernel's default.
    ScopedEnv env("BRAID_TCP_SOCKBUF", "1");
    CHECK(mentions(paramSize("BRAID_TCP_SOCKBUF", &v), "BRAID_TCP_SOCKBUF=1", "0 or 64K..1G"));
  }
  for (const char* ok : {"0", "64K", "4M"}) {
    ScopedEnv env("BRAID_TCP_SOCKBUF", ok);
    CHECK(paramSize("BRAID_TCP_SOCKBUF", &v).ok());
  }
  {
    // The ranges say "0..1T": the suffix they print is one the parser takes.
    ScopedEnv env("BRAID_SHM_CMA_MIN", "1T");
    Status s = paramSize("BRAID_SHM_CMA_MIN", &v);
    INFO(s.message());
    REQUIRE(s.ok());
    CHECK(v == size_t{1} << 40);
    ScopedEnv more("BRAID_SHM_CMA_MIN", "2t");
    CHECK(mentions(paramSize("BRAID_SHM_CMA_MIN", &v), "BRAID_SHM_CMA_MIN=2t", "0..1T"));
  }
}

TEST_CASE("booleans take 1/0, true/false, yes/no, on/off in any case and refuse the rest", "[unit][config]") {
  for (const char* yes : {"1", "true", "TRUE", "yes", "Yes", "on", "ON"}) {
    ScopedEnv env("BRAID_CHECK_MISMATCH", yes);
    bool v = false;
    INFO(yes);
    REQUIRE(paramBool("BRAID_CHECK_MISMATCH", &v).ok());
    CHECK(v);
  }
  for (const char* no : {"0", "false", "No", "off"}) {
    ScopedEnv env("BRAID_APPROXIMATE", no);
    bool v = true;
    INFO(no);
    REQUIRE(paramBool("BRAID_APPROXIMATE", &v).ok());
    CHECK_FALSE(v);
  }
  for (const char* bad : {"abc", "7x", "2", "y", "truee"}) {
    ScopedEnv env("BRAID_CHECK_MISMATCH", bad);
    bool v = false;
    Status s = paramBool("BRAID_CHECK_MISMATCH", &v);
    INFO(bad << ": " << s.message());
    CHECK(s.code() == braidInvalidArgument);
    CHECK(mentions(s, "BRAID_CHECK_MISMATCH", "true"));
    CHECK_FALSE(checkParams().ok());
  }
}

TEST_CASE("enums and lists refuse unknown names, naming the variable", "[unit][config]") {
  struct Case {
    const char* var;
    const char* value;
    bool ok;
  };
  for (const Case& c :
       {Case{"BRAID_DEBUG", "LOUD", false}, Case{"BRAID_DEBUG", "info", true}, Case{"BRAID_SIMD", "sse9", false},
        Case{"BRAID_SIMD", "AVX2", true}, Case{"BRAID_DEBUG_SUBSYS", "INIT,BOGUS", false},
        Case{"BRAID_DEBUG_SUBSYS", "^net,coll", true}, Case{"BRAID_DEBUG_SUBSYS", "P2P", true},
        Case{"BRAID_DEBUG_SUBSYS", "PROXY", false},  // no proxy thread: removed, not silently ignored
        Case{"BRAID_SHM_CMA", "maybe", false}, Case{"BRAID_SHM_CMA", "auto", true},
        Case{"BRAID_SHM_SLOT_STORES", "nt", false}, Case{"BRAID_SHM_SLOT_STORES", "Stream", true},
        Case{"BRAID_SHM_MAIL_STORES", "16K", false}, Case{"BRAID_SHM_MAIL_STORES", "auto", true},
        Case{"BRAID_TRANSPORTS", "shm,carrierpigeon", false}}) {
    ScopedEnv env(c.var, c.value);
    Status s = checkParams();
    INFO(c.var << "=" << c.value << ": " << s.message());
    CHECK(s.ok() == c.ok);
    if (!c.ok) CHECK(mentions(s, c.var));
  }
  ScopedEnv env("BRAID_SHM_CMA", "AUTO");
  std::string mode;
  REQUIRE(paramEnum("BRAID_SHM_CMA", &mode).ok());
  CHECK(mode == "auto");
}

TEST_CASE("a log file that cannot be written without blocking is an init error", "[unit][config]") {
  braidtest::ScratchDir dir("config");
  const std::string fifo = dir.file("fifo");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& bad : {fifo, dir.file("")}) {
    ScopedEnv env("BRAID_DEBUG_FILE", bad.c_str());
    Status s = checkParams();  // a FIFO without a reader: refused at once, not waited on
    INFO(bad << ": " << s.message());
    CHECK(s.code() != braidSuccess);
    CHECK(mentions(s, "BRAID_DEBUG_FILE", bad.c_str()));
  }
  for (const std::string& good : {dir.file("log.%p"), std::string("/dev/null")}) {
    ScopedEnv env("BRAID_DEBUG_FILE", good.c_str());
    Status s = checkParams();
    INFO(good << ": " << s.message());
    CHECK(s.ok());
  }
}

TEST_CASE("a topology file must be a regular file; a dump replaces only a regular file", "[unit][config][topo]") {
  braidtest::ScratchDir dir("config");
  const std::string fifo = dir.file("fifo");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  topo::TopoFile loaded;
  // A FIFO: opening it for reading without O_NONBLOCK waited for a writer forever.
  Status s = topo::loadTopoFile(fifo, &loaded);
  INFO(s.message());
  CHECK(mentions(s, fifo.c_str(), "not a regular file"));

  topo::TopoFile f;
  REQUIRE(topo::loadTopoFile(std::string(BRAID_SOURCE_DIR) + "/topology/examples/cpu-node.topo", &f).ok());
  const std::string target = dir.file("target");
  const std::string link = dir.file("link");
  FILE* t = fopen(target.c_str(), "w");
  REQUIRE(t != nullptr);
  fputs("precious\n", t);
  fclose(t);
  REQUIRE(symlink(target.c_str(), link.c_str()) == 0);
  for (const std::string& bad : {fifo, link, dir.file("")}) {
    Status d = topo::dumpTopoFile(bad, f);
    INFO(bad << ": " << d.message());
    CHECK(mentions(d, "not a regular file", "not replacing"));
  }
  struct stat st;
  REQUIRE(lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  REQUIRE(lstat(link.c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
  char buf[32] = {};
  t = fopen(target.c_str(), "r");
  REQUIRE(t != nullptr);
  CHECK(fgets(buf, sizeof(buf), t) != nullptr);
  fclose(t);
  CHECK(std::string(buf) == "precious\n");
  // A regular file, and a new name, are written.
  for (const std::string& good : {target, dir.file("new.topo")}) {
    Status d = topo::dumpTopoFile(good, f);
    INFO(good << ": " << d.message());
    REQUIRE(d.ok());
    REQUIRE(topo::loadTopoFile(good, &loaded).ok());
  }
}

}  // namespace braid

namespace braid {

TEST_CASE("every declared default parses as its knob's kind, and only the table holds it", "[unit][config]") {
  // paramDefaultInt is how code that needs a default without the environment (the cost model's
  // CostParams::defaults) reads it, instead of writing the number again.
  CHECK(paramDefaultInt("BRAID_CHUNK_SIZE") == 256 * 1024);
  CHECK(paramDefaultInt("BRAID_SPIN_US") == 50);
  CHECK(paramDefaultInt("BRAID_RANK") == 0);  // unset default
  for (const ParamInfo& p : allParams()) {
    INFO(p.name << "=" << p.defaultValue);
    if (p.defaultValue[0] != '\0') CHECK(checkParamText(p.name, p.defaultValue).ok());
  }
  CHECK(checkParamText("BRAID_TRANSPORTS", "tcp,bogus").code() == braidInvalidArgument);
  CHECK(checkParamText("BRAID_TIMEOUT", "0").code() == braidInvalidArgument);
  CHECK(checkParamText("BRAID_TIMEOUT", "").ok());  // unset
}

}  // namespace braid
