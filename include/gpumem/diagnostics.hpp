#pragma once
// gpumem's diagnostics: the one path every message of the library and of the
// preloaded shim takes to the user, with a typed level.
//
// A message is one line on stderr, "gpumem: <text>\n", written with a single
// write(2) to file descriptor 2: lines of several threads or processes never
// interleave, and nothing waits in a buffer that _exit or a crash would lose.
// (A text that already starts with "gpumem: ", such as an exception's what(),
// is not prefixed twice.) Messages below the process-wide threshold cost one
// relaxed atomic load. The threshold is warn until set_log_level() changes it; the
// shim sets it once, from the configuration's log_level (GPUMEM_LOG_LEVEL).
//
// What it may cost, and where it may be called:
// - Formatting is vsnprintf into a 1 KiB buffer on the stack. Only a longer line
//   (a path near PATH_MAX) allocates, once, so that it is never cut before the
//   reason at its end; without memory it is cut. No lock is taken.
// - vsnprintf is not async-signal-safe: never call this from a signal handler.
// - On an allocation path a message is for a rare event (a failure, a refused
//   call, a first use), never per call; a message that could repeat per call is
//   rate-limited by its caller (detail::report_free_failure).
//
// Why not spdlog (and why gpumem no longer depends on it): spdlog's logger formats
// into a heap buffer for any line over 250 bytes (many of ours name paths and
// sizes), its default logger is a shared_ptr built on first use, and its sinks
// hold a mutex around formatting and writing: a thread holding that mutex at
// fork() leaves the child's first message deadlocked, and the preloaded shim
// runs inside programs that fork (PyTorch's data loaders). Its default pattern
// also calls localtime_r (glibc's time-zone lock) once a second. (spdlog 1.10 with
// fmt 9, the distribution's.) For one line per rare event, printf-style formatting
// checked by the compiler and one write(2) do all we need, with no state to break.

#include <cstdarg>
#include <optional>
#include <string_view>

namespace gpumem {

/// How much gpumem says. Each level includes the ones after it; off says nothing.
enum class log_level : int { trace = 0, debug = 1, info = 2, warn = 3, error = 4, off = 5 };

/// The spellings a configuration accepts, as its error messages list them.
inline constexpr std::string_view log_level_choices = "trace|debug|info|warn|error|off";

/// The level spelled `name` (exactly one of log_level_choices); nullopt otherwise.
[[nodiscard]] std::optional<log_level> parse_log_level(std::string_view name) noexcept;
[[nodiscard]] std::string_view to_string(log_level level) noexcept;

/// The process-wide threshold: messages below it are dropped. Thread-safe.
void set_log_level(log_level threshold) noexcept;
[[nodiscard]] log_level current_log_level() noexcept;
/// Whether a message of `level` would be written (never for off).
[[nodiscard]] bool log_enabled(log_level level) noexcept;

/// Writes one printf-formatted line if `level` passes the threshold.
void log_message(log_level level, const char* format, ...) noexcept __attribute__((format(printf, 2, 3)));
void log_message_v(log_level level, const char* format, std::va_list args) noexcept
    __attribute__((format(printf, 2, 0)));

/// Writes one line whatever the threshold: the last words of a process about to
/// exit, or findings a caller has filtered by a level of its own.
void log_unfiltered(const char* format, ...) noexcept __attribute__((format(printf, 1, 2)));

}  // namespace gpumem
