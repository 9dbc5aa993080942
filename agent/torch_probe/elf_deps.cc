#include "agent/torch_probe/elf_deps.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "common/file_util.h"

namespace ddprun::agent {
namespace {

// An open file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(const std::string& path)
      : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  // Reads exactly `size` bytes at `offset`.
  bool ReadAt(void* buf, std::size_t size, std::uint64_t offset) const {
    char* p = static_cast<char*>(buf);
    while (size > 0) {
      ssize_t got = ::pread(fd_, p, size, static_cast<off_t>(offset));
      if (got <= 0) return false;
      p += got;
      size -= static_cast<std::size_t>(got);
      offset += static_cast<std::uint64_t>(got);
    }
    return true;
  }

 private:
  int fd_;
};

std::string ReplaceOrigin(std::string dir, const std::string& origin) {
  for (const char* token : {"${ORIGIN}", "$ORIGIN"}) {
    const std::size_t len = std::strlen(token);
    for (auto pos = dir.find(token); pos != std::string::npos;
         pos = dir.find(token, pos + origin.size())) {
      dir.replace(pos, len, origin);
    }
  }
  return dir;
}

}  // namespace

bool IsElfFile(const std::string& path) {
  Fd fd(path);
  unsigned char magic[4] = {0, 0, 0, 0};
  return fd.ok() && fd.ReadAt(magic, 4, 0) && magic[0] == ELFMAG0 &&
         magic[1] == ELFMAG1 && magic[2] == ELFMAG2 && magic[3] == ELFMAG3;
}

StatusOr<ElfDeps> ReadElfDeps(const std::string& path) {
  Fd fd(path);
  if (!fd.ok()) return NotFoundError("cannot open '" + path + "'");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return NotFoundError("cannot stat '" + path + "'");
  }
  const std::uint64_t file_size = static_cast<std::uint64_t>(st.st_size);
  auto bad = [&path](const char* why) {
    return InvalidArgumentError("'" + path + "': " + why);
  };
  Elf64_Ehdr eh;
  if (!fd.ReadAt(&eh, sizeof(eh), 0) ||
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return bad("not an ELF file");
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return bad("not a 64-bit little-endian ELF file");
  }
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 4096 ||
      eh.e_phoff + std::uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr) > file_size) {
    return bad("bad program headers");
  }
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!ph.empty() &&
      !fd.ReadAt(ph.data(), ph.size() * sizeof(Elf64_Phdr), eh.e_phoff)) {
    return bad("short read of the program headers");
  }
  const Elf64_Phdr* dynamic = nullptr;
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type == PT_DYNAMIC) dynamic = &p;
  }
  ElfDeps deps;
  if (dynamic == nullptr) return deps;  // statically linked
  if (dynamic->p_offset + dynamic->p_filesz > file_size ||
      dynamic->p_filesz > (1u << 20)) {
    return bad("bad dynamic segment");
  }
  std::vector<Elf64_Dyn> dyn(dynamic->p_filesz / sizeof(Elf64_Dyn));
  if (!dyn.empty() && !fd.ReadAt(dyn.data(), dyn.size() * sizeof(Elf64_Dyn),
                                 dynamic->p_offset)) {
    return bad("short read of the dynamic segment");
  }
  std::uint64_t strtab_addr = 0, strtab_size = 0;
  std::vector<std::uint64_t> needed, runpath, rpath;
  for (const Elf64_Dyn& d : dyn) {
    if (d.d_tag == DT_NULL) break;
    switch (d.d_tag) {
      case DT_STRTAB:
        strtab_addr = d.d_un.d_ptr;
        break;
      case DT_STRSZ:
        strtab_size = d.d_un.d_val;
        break;
      case DT_NEEDED:
        needed.push_back(d.d_un.d_val);
        break;
      case DT_RUNPATH:
        runpath.push_back(d.d_un.d_val);
        break;
      case DT_RPATH:
        rpath.push_back(d.d_un.d_val);
        break;
      default:
        break;
    }
  }
  // DT_STRTAB is a virtual address: map it to a file offset through the
  // PT_LOAD segment that contains it.
  std::uint64_t strtab_offset = 0;
  bool mapped = false;
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type == PT_LOAD && strtab_addr >= p.p_vaddr &&
        strtab_addr < p.p_vaddr + p.p_filesz) {
      strtab_offset = strtab_addr - p.p_vaddr + p.p_offset;
      mapped = true;
      break;
    }
  }
  if (!mapped || strtab_size > (16u << 20) ||
      strtab_offset + strtab_size > file_size) {
    return bad("bad dynamic string table");
  }
  std::string strtab(strtab_size, '\0');
  if (strtab_size > 0 &&
      !fd.ReadAt(strtab.data(), strtab_size, strtab_offset)) {
    return bad("short read of the dynamic string table");
  }
  auto str = [&strtab](std::uint64_t off) -> std::string {
    if (off >= strtab.size()) return "";
    return std::string(strtab.c_str() + off);
  };
  for (std::uint64_t off : needed) deps.needed.push_back(str(off));
  const std::string origin = Dirname(path);
  for (std::uint64_t off : runpath.empty() ? rpath : runpath) {
    const std::string list = str(off);
    std::string::size_type start = 0;
    while (start <= list.size()) {
      auto colon = list.find(':', start);
      std::string dir = list.substr(start, colon - start);
      if (!dir.empty()) deps.runpath.push_back(ReplaceOrigin(dir, origin));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  return deps;
}

}  // namespace ddprun::agent
