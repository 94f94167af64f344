#pragma once
// gpumem::config — configuration (TOML file + GPUMEM_* environment) and the builder of
// each device's resource chain.
//
// Typical use (the shim does exactly this, once per process and once per device):
//   auto env = gpumem::config::environment::from_process();
//   gpumem::config::settings s = gpumem::config::load(env);   // throws config_error
//   auto chain = gpumem::config::build_chain(s, device);       // device's context current
//   void* p = chain->top().allocate(bytes, stream);
// The file format is documented in config/default.toml and config/*.toml.
//
// Thread safety: every function here is reentrant (no global state); load() reads
// only the environment snapshot it is given. Nothing is cached between calls.

#include <gpumem/config/config_error.hpp>
#include <gpumem/config/environment.hpp>
#include <gpumem/config/resource_chain.hpp>
#include <gpumem/config/settings.hpp>
#include <gpumem/config/size_parse.hpp>

#include <string_view>

namespace gpumem::config {

/// Settings from TOML text. `source_name` is used in messages and settings::source.
/// Throws config_error ("gpumem: config error: <source>:<line>:<col>: <key>: <problem> (<hint>)").
[[nodiscard]] settings parse_toml(std::string_view text, std::string_view source_name);

/// The embedded default configuration (config/default.toml, compiled in).
[[nodiscard]] std::string_view default_toml() noexcept;

/// GPUMEM_CONFIG's file (else the embedded default) with the GPUMEM_* overrides applied:
///  - GPUMEM_DISABLE=1|true|yes|on returns at once with disabled = true (no file is
///    read, so a broken file cannot stop a pass-through run);
///  - GPUMEM_SYNC_MODE, GPUMEM_ON_ERROR, GPUMEM_LOG_FILE, GPUMEM_LOG_LEVEL, GPUMEM_REPORT,
///    GPUMEM_REPORT_FILE, GPUMEM_DEFERRED_FLUSH replace the [gpumem] values;
///  - GPUMEM_RESOURCE=pool|binning|async|cuda|managed keeps the chain's adaptors (in
///    written order, outermost) over that canonical chain: pool → cuda; binning(256 B..
///    1 MiB) → pool → cuda; async; cuda; managed;
///  - then GPUMEM_POOL_SIZE / GPUMEM_POOL_MAX set the first pool (error without one);
///  - then GPUMEM_LIMIT sets the first limiting adaptor, or adds one outermost.
/// Empty variables count as unset. Unknown GPUMEM_* variables become warnings (printed to
/// stderr unless log_level is error/off, kept in settings::warnings). Throws
/// config_error naming the variable, or the file, line, column and key; its `policy`
/// says what the user asked to do about it.
[[nodiscard]] settings load(environment const& env);

}  // namespace gpumem::config
