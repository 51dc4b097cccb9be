//! Listing and deleting on local disk without following symbolic links.
//!
//! `object_store`'s `LocalFileSystem` walks directories following links and
//! deletes by joining the key onto its root, so one link inside a dataset
//! (`data/evil -> /elsewhere`) makes a listing report files outside the root
//! and a delete of such a key remove them. Garbage collection decides what to
//! delete from listings, so both must stay inside the root:
//!
//! - A listing never descends through a link: a link is reported as one object
//!   with its own metadata (so cleanup can remove an orphaned link as a link),
//!   and a prefix reached through a link lists nothing.
//! - A delete opens every directory on the way from the root with
//!   `O_NOFOLLOW`, relative to the one before (`openat`), so a link in the
//!   middle fails the delete, even one swapped in after the listing; the last
//!   component is unlinked, which removes a link itself, never its target.
//!
//! The root itself may be reached through links: stores are opened at the
//! canonical path of the dataset directory.

use std::fs::Metadata;
use std::io;
use std::path::{Component, Path as FsPath};

use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::ObjectMeta;
use rustix::fs::{openat, unlinkat, AtFlags, Mode, OFlags, CWD};
use walkdir::WalkDir;

/// Every object under `start` (a directory below `root`, or `root`),
/// recursively, without following links; a link is one object. Nothing is
/// listed when `start` or a directory between `root` and it is a link, or
/// when `start` does not exist. Staging files of uploads in flight
/// (`<name>#<digits>`) are left out, as `LocalFileSystem` does.
///
/// # Errors
/// The I/O error of a directory that cannot be read.
pub(crate) fn list(root: &FsPath, start: &FsPath) -> io::Result<Vec<ObjectMeta>> {
    if !reached_without_links(root, start)? {
        return Ok(Vec::new());
    }
    let walk = WalkDir::new(start)
        .min_depth(1)
        .follow_links(false)
        .follow_root_links(false);
    let mut objects = Vec::new();
    for entry in walk {
        let entry = match entry {
            Ok(entry) => entry,
            // Removed while we walked: as if listed a moment later.
            Err(err) if err.io_error().map(io::Error::kind) == Some(io::ErrorKind::NotFound) => {
                continue
            }
            Err(err) => return Err(err.into()),
        };
        if entry.file_type().is_dir() {
            continue;
        }
        if is_staging_file(entry.file_name()) {
            continue;
        }
        let Some(location) = object_path(root, entry.path()) else {
            // Not a name Refract writes (not UTF-8): never ours to delete.
            continue;
        };
        // With `follow_links(false)` this is the entry's own (`lstat`) metadata.
        let metadata = match entry.metadata() {
            Ok(metadata) => metadata,
            Err(err) if err.io_error().map(io::Error::kind) == Some(io::ErrorKind::NotFound) => {
                continue
            }
            Err(err) => return Err(err.into()),
        };
        objects.push(object_meta(location, &metadata));
    }
    Ok(objects)
}

/// Deletes `target`, a file (or link) below `root`, opening each directory on
/// the way without following links.
///
/// # Errors
/// NotFound when a component is missing; InvalidInput when `target` is not a
/// plain path below `root`; the refusal (`ELOOP`/`ENOTDIR`, reported with the
/// offending component) when a directory on the way is a link; other I/O
/// errors as the system reports them.
pub(crate) fn delete(root: &FsPath, target: &FsPath) -> io::Result<()> {
    let relative = target.strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not below {}", target.display(), root.display()),
        )
    })?;
    let mut names = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => names.push(name),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is not a plain relative path", relative.display()),
                ))
            }
        }
    }
    let Some((last, dirs)) = names.split_last() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "refusing to delete the dataset root",
        ));
    };
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut dir = openat(CWD, root, dir_flags, Mode::empty())?;
    for (depth, name) in dirs.iter().enumerate() {
        dir = openat(&dir, *name, dir_flags | OFlags::NOFOLLOW, Mode::empty()).map_err(|errno| {
            let err = io::Error::from(errno);
            if err.kind() == io::ErrorKind::NotFound {
                return err;
            }
            let through: std::path::PathBuf = dirs[..=depth].iter().collect();
            io::Error::new(
                err.kind(),
                format!(
                    "refusing to delete {}: {} is not a directory of the dataset (a symbolic link?): {err}",
                    relative.display(),
                    through.display()
                ),
            )
        })?;
    }
    unlinkat(&dir, *last, AtFlags::empty())?;
    Ok(())
}

/// True when every directory from `root` (excluded) down to `start`
/// (included) is a real directory; false when one is a link or missing.
fn reached_without_links(root: &FsPath, start: &FsPath) -> io::Result<bool> {
    let Ok(relative) = start.strip_prefix(root) else {
        return Ok(false);
    };
    let mut current = root.to_path_buf();
    for component in relative.components() {
        let Component::Normal(name) = component else {
            return Ok(false);
        };
        current.push(name);
        match std::fs::symlink_metadata(&current) {
            Ok(metadata) if metadata.file_type().is_dir() => {}
            Ok(_) => return Ok(false),
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(err) => return Err(err),
        }
    }
    Ok(true)
}

/// The store key of `path` below `root`; `None` for a name that is not UTF-8.
fn object_path(root: &FsPath, path: &FsPath) -> Option<Path> {
    let relative = path.strip_prefix(root).ok()?;
    let parts = relative
        .components()
        .map(|component| match component {
            Component::Normal(name) => name.to_str(),
            _ => None,
        })
        .collect::<Option<Vec<&str>>>()?;
    Some(Path::from_iter(parts))
}

/// `<name>#<digits>`: the staging file of an upload in flight.
fn is_staging_file(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .and_then(|name| name.rsplit_once('#'))
        .is_some_and(|(_, suffix)| !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()))
}

fn object_meta(location: Path, metadata: &Metadata) -> ObjectMeta {
    let last_modified: DateTime<Utc> = metadata
        .modified()
        .map(DateTime::from)
        .unwrap_or(DateTime::UNIX_EPOCH);
    ObjectMeta {
        location,
        last_modified,
        size: metadata.len(),
        e_tag: None,
        version: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn names(objects: &[ObjectMeta]) -> Vec<String> {
        let mut names: Vec<String> = objects.iter().map(|o| o.location.to_string()).collect();
        names.sort();
        names
    }

    /// `root/data/evil` links to the directory `outside`, and
    /// `root/data/file-link` to `outside/precious.txt`.
    fn linked_root() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("precious.txt"), b"keep").unwrap();
        symlink(&outside, root.join("data/evil")).unwrap();
        symlink(outside.join("precious.txt"), root.join("data/file-link")).unwrap();
        (dir, root, outside)
    }

    #[test]
    fn a_listing_reports_links_as_objects_and_never_descends_through_them() {
        let (_dir, root, outside) = linked_root();
        std::fs::create_dir_all(root.join("data/sub")).unwrap();
        std::fs::write(root.join("data/a.lance"), b"a").unwrap();
        std::fs::write(root.join("data/sub/b.lance"), b"bb").unwrap();
        std::fs::write(root.join("data/c.lance#3"), b"staging").unwrap();
        let listed = list(&root, &root.join("data")).unwrap();
        assert_eq!(
            names(&listed),
            [
                "data/a.lance",
                "data/evil",
                "data/file-link",
                "data/sub/b.lance"
            ]
        );
        let link = listed
            .iter()
            .find(|o| o.location.as_ref() == "data/file-link");
        let link_len = std::fs::symlink_metadata(root.join("data/file-link"))
            .unwrap()
            .len();
        assert_eq!(link.unwrap().size, link_len, "the link's own size");
        // A prefix reached through a link lists nothing.
        assert!(list(&root, &root.join("data/evil")).unwrap().is_empty());
        std::fs::create_dir_all(root.join("real")).unwrap();
        symlink(&outside, root.join("real/inner")).unwrap();
        assert!(list(&root, &root.join("real/inner")).unwrap().is_empty());
        assert!(list(&root, &root.join("missing")).unwrap().is_empty());
    }

    #[test]
    fn a_delete_removes_a_link_never_its_target_and_never_passes_through_one() {
        let (_dir, root, outside) = linked_root();

        let err = delete(&root, &root.join("data/evil/precious.txt")).unwrap_err();
        assert!(err.to_string().contains("data/evil"), "{err}");
        assert_eq!(
            std::fs::read(outside.join("precious.txt")).unwrap(),
            b"keep"
        );

        delete(&root, &root.join("data/file-link")).unwrap();
        delete(&root, &root.join("data/evil")).unwrap();
        assert!(std::fs::symlink_metadata(root.join("data/evil")).is_err());
        assert!(std::fs::symlink_metadata(root.join("data/file-link")).is_err());
        assert_eq!(
            std::fs::read(outside.join("precious.txt")).unwrap(),
            b"keep"
        );

        let missing = delete(&root, &root.join("data/gone.lance")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let escape = delete(&root, &outside.join("precious.txt")).unwrap_err();
        assert_eq!(escape.kind(), io::ErrorKind::InvalidInput);
        let parent = delete(&root, &root.join("data/../../outside/precious.txt")).unwrap_err();
        assert_eq!(parent.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            std::fs::read(outside.join("precious.txt")).unwrap(),
            b"keep"
        );
    }
}
