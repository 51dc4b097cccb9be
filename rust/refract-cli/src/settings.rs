//! The diagnostic environment variables, mapped onto library options here and
//! nowhere else (the libraries read no environment):
//!
//! * `REFRACT_FRI_ROWMAP_CACHE=0` — read row-map labels without the chunk
//!   cache; `REFRACT_FRI_ROWMAP_PREWARM=1` — load every chunk at open
//!   ([`ChunkCacheMode`] on queries, remaps and maintenance);
//! * `REFRACT_DIRECT_WRITES=0` (or `false`) — buffered writes on a local disk
//!   (the storage option [`DIRECT_WRITES_OPTION`]).

use refract_reader::{ChunkCacheMode, FriResolver};
use refract_table::io::{StorageOptions, DIRECT_WRITES_OPTION};

/// Turns the row-map chunk cache off when `0`.
pub const ROWMAP_CACHE_ENV: &str = "REFRACT_FRI_ROWMAP_CACHE";
/// Loads every row-map chunk at open when `1`.
pub const ROWMAP_PREWARM_ENV: &str = "REFRACT_FRI_ROWMAP_PREWARM";
/// Turns direct writes on a local disk off when `0` or `false`.
pub const DIRECT_WRITES_ENV: &str = "REFRACT_DIRECT_WRITES";

/// The chunk-cache mode the environment asks for (lazy by default).
pub fn chunk_cache_mode() -> ChunkCacheMode {
    chunk_cache_mode_from(|name| std::env::var(name).ok())
}

/// The FRI resolver queries use, per [`chunk_cache_mode`].
pub fn resolver() -> FriResolver {
    FriResolver::with_mode(chunk_cache_mode())
}

/// Sets the direct-writes storage option of a local `uri` from the
/// environment, unless the options already set it.
pub fn apply_local_write_mode(uri: &str, storage: &mut StorageOptions) {
    apply_local_write_mode_from(uri, storage, std::env::var(DIRECT_WRITES_ENV).ok());
}

fn chunk_cache_mode_from(var: impl Fn(&str) -> Option<String>) -> ChunkCacheMode {
    let flag = |name: &str| var(name).map(|v| v.trim().to_string());
    if flag(ROWMAP_CACHE_ENV).as_deref() == Some("0") {
        ChunkCacheMode::Disabled
    } else if flag(ROWMAP_PREWARM_ENV).as_deref() == Some("1") {
        ChunkCacheMode::Prewarm
    } else {
        ChunkCacheMode::Lazy
    }
}

fn apply_local_write_mode_from(uri: &str, storage: &mut StorageOptions, value: Option<String>) {
    let local = !uri.contains("://") || uri.starts_with("file://");
    let off =
        value.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "false"));
    if local && off && storage.get(DIRECT_WRITES_OPTION).is_none() {
        storage.insert(DIRECT_WRITES_OPTION, "false");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_cache_flags_map_onto_modes() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(chunk_cache_mode_from(env(&[])), ChunkCacheMode::Lazy);
        assert_eq!(
            chunk_cache_mode_from(env(&[(ROWMAP_CACHE_ENV, "0")])),
            ChunkCacheMode::Disabled
        );
        assert_eq!(
            chunk_cache_mode_from(env(&[(ROWMAP_PREWARM_ENV, " 1 ")])),
            ChunkCacheMode::Prewarm
        );
        assert_eq!(
            chunk_cache_mode_from(env(&[(ROWMAP_CACHE_ENV, "1")])),
            ChunkCacheMode::Lazy
        );
    }

    #[test]
    fn direct_writes_go_off_only_for_local_paths_and_never_override() {
        let mut storage = StorageOptions::new();
        apply_local_write_mode_from("/tmp/t", &mut storage, Some("0".into()));
        assert_eq!(storage.get(DIRECT_WRITES_OPTION), Some("false"));
        let mut cloud = StorageOptions::new();
        apply_local_write_mode_from("s3://b/t", &mut cloud, Some("false".into()));
        assert!(cloud.is_empty());
        let mut given: StorageOptions = [(DIRECT_WRITES_OPTION, "true")].into_iter().collect();
        apply_local_write_mode_from("file:///tmp/t", &mut given, Some("0".into()));
        assert_eq!(given.get(DIRECT_WRITES_OPTION), Some("true"));
        let mut unset = StorageOptions::new();
        apply_local_write_mode_from("/tmp/t", &mut unset, Some("1".into()));
        assert!(unset.is_empty());
    }
}
