// Internal: opening a file that must be a regular file, and reading a small one whole: the one
// helper of the checkpoint readers (io/) and the tokenizer (text/), which throw their own error
// type through it. Rules:
// - A missing file, a directory, a named pipe, a device or a socket is refused by name before a
//   byte is read: its type is checked with stat before it is opened, and again with fstat on the
//   descriptor; the open is O_NONBLOCK, so a named pipe is never waited on, and a link to
//   /dev/zero is a device, never read.
// - A file larger than the caller's limit is refused by name before it is read; a read never
//   goes past the size stat gave (a file that grows meanwhile is read up to that size).
// Messages: "<where>cannot open <path>: No such file or directory",
// "<where>cannot read <path>: it is a named pipe", "<where>cannot read <path>: it is 2147483648
// bytes, more than the 1073741824 read here".
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include <filesystem>
#include <fstream>
#include <system_error>

#include "headwise/detail/platform.hpp"  // HEADWISE_POSIX: fcntl.h, sys/stat.h, unistd.h

namespace headwise::detail {

/// No limit on a file's size (a checkpoint's shards are mapped, not read).
inline constexpr std::uint64_t any_file_size = std::numeric_limits<std::uint64_t>::max();

template <class Error>
[[noreturn]] void refuse_file(const std::string& where, const std::string& path, const std::string& why) {
  throw Error(where + "cannot read " + path + ": " + why);
}

template <class Error>
void check_file_size(const std::string& where, const std::string& path, std::uint64_t size, std::uint64_t max_bytes) {
  if (size > max_bytes)
    refuse_file<Error>(where, path, "it is " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) + " read here");
}

#if HEADWISE_POSIX
/// What a file of this mode is, for a message ("a named pipe"), or "" for a regular file.
inline const char* non_regular_kind(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a named pipe";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/// A file descriptor open on a regular file, closed with the object.
struct RegularFile {
  int fd = -1;
  std::size_t size = 0;
  RegularFile() = default;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile() {
    if (fd >= 0) ::close(fd);
  }
};

/// Opens path read-only if it is a regular file of at most max_bytes (see the top of this file);
/// else throws Error("<where>cannot open|read <path>: ..."). Reads of the file then block as usual.
template <class Error>
void open_regular(const std::string& path, const std::string& where, std::uint64_t max_bytes, RegularFile& file) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) throw Error(where + "cannot open " + path + ": " + std::strerror(errno));
  if (!S_ISREG(status.st_mode)) refuse_file<Error>(where, path, std::string("it is ") + non_regular_kind(status.st_mode));
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (file.fd < 0) throw Error(where + "cannot open " + path + ": " + std::strerror(errno));
  if (::fstat(file.fd, &status) != 0) refuse_file<Error>(where, path, std::strerror(errno));
  if (!S_ISREG(status.st_mode)) refuse_file<Error>(where, path, std::string("it is ") + non_regular_kind(status.st_mode));
  check_file_size<Error>(where, path, static_cast<std::uint64_t>(status.st_size), max_bytes);
  file.size = static_cast<std::size_t>(status.st_size);
  const int flags = ::fcntl(file.fd, F_GETFL);
  if (flags >= 0) ::fcntl(file.fd, F_SETFL, flags & ~O_NONBLOCK);
}

/// The whole text of the regular file at path, at most max_bytes long (open_regular's refusals).
template <class Error>
std::string read_regular_text(const std::string& path, const std::string& where, std::uint64_t max_bytes) {
  RegularFile file;
  open_regular<Error>(path, where, max_bytes, file);
  std::string text(file.size, '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const auto got = ::read(file.fd, &text[done], text.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) refuse_file<Error>(where, path, std::strerror(errno));
    if (got == 0) break;  // the file shrank while read: take what is there
    done += static_cast<std::size_t>(got);
  }
  text.resize(done);
  return text;
}
#else
/// The whole text of the regular file at path, at most max_bytes long (where there is no POSIX:
/// the type and size from std::filesystem, then the read).
template <class Error>
std::string read_regular_text(const std::string& path, const std::string& where, std::uint64_t max_bytes) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw Error(where + "cannot open " + path + ": no such file");
  if (std::filesystem::is_directory(status)) refuse_file<Error>(where, path, "it is a directory");
  if (!std::filesystem::is_regular_file(status)) refuse_file<Error>(where, path, "it is not a regular file");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) refuse_file<Error>(where, path, ec.message());
  check_file_size<Error>(where, path, static_cast<std::uint64_t>(size), max_bytes);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(where + "cannot open " + path);
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(&text[0], static_cast<std::streamsize>(size));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}
#endif

}  // namespace headwise::detail
