//! [`Cgroup`]: the headroom of the process's memory cgroup ([`CgroupVersion`] v2
//! or v1) under the tightest limit on its chain of ancestors.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use super::{
    io_error, limit_watermarks, parse_error, parse_u64, read, read_optional, read_psi,
    single_token, Pressure, PressureError, PressureSource, CGROUP_V1_UNLIMITED_BYTES,
};

/// The cgroup interface a directory speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupVersion {
    /// The unified hierarchy: `memory.max`, `memory.current`, `memory.stat`,
    /// `memory.pressure`.
    V2,
    /// The v1 memory controller: `memory.limit_in_bytes`, `memory.usage_in_bytes`,
    /// `memory.stat`. No PSI.
    V1,
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupVersion::V2 => "cgroup v2",
            CgroupVersion::V1 => "cgroup v1",
        })
    }
}

/// The headroom of a memory cgroup: free = limit − working set, where the working
/// set is the usage minus the inactive file cache (the figure the kubelet evicts on;
/// inactive clean cache is reclaimed before anything swaps).
///
/// Limits nest: a group is bound by every ancestor's limit too. [`Cgroup::detect`]
/// therefore keeps the chain of directories from the process's own group up to the
/// mount root, and each sample reports the group of that chain with the least
/// headroom. Groups without a limit (`max`, a v1 limit of
/// [`CGROUP_V1_UNLIMITED_BYTES`] or more, no limit file as in the root group) are
/// skipped; if none has one, the sample is [`PressureError::NoLimit`] and the caller
/// falls back to [`ZoneInfo`](super::ZoneInfo) or [`MemInfo`](super::MemInfo).
///
/// Watermarks are fractions of the binding group's limit: [`limit_watermarks`]:
/// 1 %, 1.25 % and 1.5 % of it; `total` is the limit.
/// PSI is the v2 `memory.pressure` of the process's own group.
#[derive(Clone, Debug)]
pub struct Cgroup {
    version: CgroupVersion,
    /// From the process's own group (first) up to the root.
    dirs: Vec<PathBuf>,
}

/// One group's limit and working set.
struct GroupReading {
    limit: u64,
    headroom: u64,
}

impl Cgroup {
    /// A v2 group at `dir` alone (no ancestors).
    pub fn v2(dir: impl Into<PathBuf>) -> Self {
        Cgroup {
            version: CgroupVersion::V2,
            dirs: vec![dir.into()],
        }
    }

    /// A v1 memory group at `dir` alone (no ancestors).
    pub fn v1(dir: impl Into<PathBuf>) -> Self {
        Cgroup {
            version: CgroupVersion::V1,
            dirs: vec![dir.into()],
        }
    }

    /// The process's memory cgroup, from `/proc/self/cgroup` and the mounts under
    /// `/sys/fs/cgroup`.
    pub fn detect() -> Result<Self, PressureError> {
        Cgroup::detect_in("/proc/self/cgroup", "/sys/fs/cgroup")
    }

    /// As [`Cgroup::detect`], with the `/proc/self/cgroup` file and the cgroup mount
    /// root given (tests).
    ///
    /// A line `N:...memory...:/path` means the v1 memory controller, mounted at
    /// `root/memory`; otherwise `0::/path` means v2, mounted at `root` (or at
    /// `root/unified` on a hybrid system). The chain runs from `mount/path` up to
    /// `mount`, keeping the directories that exist: inside a container whose mount
    /// shows only its own group, the path may not exist and the chain is the mount.
    pub fn detect_in(
        proc_self_cgroup: impl AsRef<Path>,
        root: impl AsRef<Path>,
    ) -> Result<Self, PressureError> {
        let file = proc_self_cgroup.as_ref();
        let root = root.as_ref();
        let text = read(file)?;
        let mut v1 = None;
        let mut v2 = None;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let mut fields = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(rel)) =
                (fields.next(), fields.next(), fields.next())
            else {
                return Err(parse_error(file, i + 1, "expected `ID:CONTROLLERS:PATH`"));
            };
            if !rel.starts_with('/') {
                return Err(parse_error(
                    file,
                    i + 1,
                    "cgroup path does not start with `/`",
                ));
            }
            if controllers.split(',').any(|c| c == "memory") {
                v1 = Some((i + 1, rel));
            } else if id == "0" && controllers.is_empty() {
                v2 = Some((i + 1, rel));
            }
        }
        let (version, mount, (line, rel)) = match (v1, v2) {
            (Some(found), _) => (CgroupVersion::V1, root.join("memory"), found),
            (None, Some(found)) => {
                let unified = root.join("unified");
                let mount = if !root.join("cgroup.controllers").exists() && unified.is_dir() {
                    unified
                } else {
                    root.to_path_buf()
                };
                (CgroupVersion::V2, mount, found)
            }
            (None, None) => {
                return Err(PressureError::NoCgroup {
                    path: file.to_path_buf(),
                })
            }
        };
        let mut chain = vec![mount.clone()];
        let mut dir = mount;
        for component in Path::new(rel).components() {
            match component {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(name) => {
                    dir = dir.join(name);
                    chain.push(dir.clone());
                }
                Component::ParentDir | Component::Prefix(_) => {
                    return Err(parse_error(file, line, "cgroup path leaves its mount"));
                }
            }
        }
        let dirs: Vec<PathBuf> = chain.into_iter().rev().filter(|d| d.is_dir()).collect();
        if dirs.is_empty() {
            return Err(PressureError::NoCgroup {
                path: file.to_path_buf(),
            });
        }
        Ok(Cgroup { version, dirs })
    }

    /// The interface of the group.
    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The directories looked at, from the process's own group up to the root.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The limit of the group at `dir`, `None` if it has none.
    fn limit(&self, dir: &Path) -> Result<Option<u64>, PressureError> {
        let (name, unlimited_from) = match self.version {
            CgroupVersion::V2 => ("memory.max", u64::MAX),
            CgroupVersion::V1 => ("memory.limit_in_bytes", CGROUP_V1_UNLIMITED_BYTES),
        };
        let path = dir.join(name);
        let Some(text) = read_optional(&path)? else {
            return Ok(None);
        };
        let token = single_token(&path, &text)?;
        if self.version == CgroupVersion::V2 && token == "max" {
            return Ok(None);
        }
        let limit = parse_u64(&path, 1, token, name)?;
        Ok((limit < unlimited_from).then_some(limit))
    }

    /// Usage minus inactive file cache, for the group at `dir`.
    fn working_set(&self, dir: &Path) -> Result<u64, PressureError> {
        let (usage_name, inactive_keys): (&str, &[&str]) = match self.version {
            CgroupVersion::V2 => ("memory.current", &["inactive_file"]),
            CgroupVersion::V1 => (
                "memory.usage_in_bytes",
                &["total_inactive_file", "inactive_file"],
            ),
        };
        let usage_path = dir.join(usage_name);
        let usage = parse_u64(
            &usage_path,
            1,
            single_token(&usage_path, &read(&usage_path)?)?,
            usage_name,
        )?;
        let stat_path = dir.join("memory.stat");
        let inactive = match read_optional(&stat_path)? {
            Some(text) => parse_stat_first(&stat_path, &text, inactive_keys)?.unwrap_or(0),
            None => 0,
        };
        Ok(usage.saturating_sub(inactive))
    }

    fn reading(&self, dir: &Path) -> Result<Option<GroupReading>, PressureError> {
        let Some(limit) = self.limit(dir)? else {
            return Ok(None);
        };
        let working_set = self.working_set(dir)?;
        Ok(Some(GroupReading {
            limit,
            headroom: limit.saturating_sub(working_set),
        }))
    }
}

/// The value of the first of `keys` present in a `memory.stat` file (`key value`
/// lines), `None` if none is.
fn parse_stat_first(path: &Path, text: &str, keys: &[&str]) -> Result<Option<u64>, PressureError> {
    let mut found: Vec<Option<u64>> = vec![None; keys.len()];
    for (i, line) in text.lines().enumerate() {
        let mut tokens = line.split_whitespace();
        let Some(key) = tokens.next() else {
            continue;
        };
        let Some(k) = keys.iter().position(|wanted| *wanted == key) else {
            continue;
        };
        let (Some(value), None) = (tokens.next(), tokens.next()) else {
            return Err(parse_error(
                path,
                i + 1,
                format!("expected `{key} <bytes>`"),
            ));
        };
        found[k] = Some(parse_u64(path, i + 1, value, key)?);
    }
    Ok(found.into_iter().flatten().next())
}

impl PressureSource for Cgroup {
    fn sample(&mut self) -> Result<Pressure, PressureError> {
        let Some(leaf) = self.dirs.first() else {
            return Err(PressureError::NoCgroup {
                path: PathBuf::new(),
            });
        };
        // A group directory that is gone is an error, not "no limit".
        std::fs::metadata(leaf).map_err(|e| io_error(leaf, e))?;
        let mut binding: Option<GroupReading> = None;
        for dir in &self.dirs {
            let Some(reading) = self.reading(dir)? else {
                continue;
            };
            // Strictly less: on a tie the group nearer the process binds.
            if binding
                .as_ref()
                .is_none_or(|b| reading.headroom < b.headroom)
            {
                binding = Some(reading);
            }
        }
        let Some(binding) = binding else {
            return Err(PressureError::NoLimit { path: leaf.clone() });
        };
        let (psi_some_avg10, source) = match self.version {
            CgroupVersion::V2 => {
                let psi = leaf.join("memory.pressure");
                (read_psi(Some(psi.as_path()))?, "cgroup-v2")
            }
            CgroupVersion::V1 => (None, "cgroup-v1"),
        };
        let (min, low, high) = limit_watermarks(binding.limit);
        Ok(Pressure {
            free_bytes: binding.headroom,
            min,
            low,
            high,
            total: binding.limit,
            psi_some_avg10,
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::pressure::test_util::{assert_parse_error, Scratch, GIB};

    fn v2_group(
        scratch: &Scratch,
        rel: &str,
        max: &str,
        current: &str,
        inactive_file: Option<u64>,
    ) -> PathBuf {
        let dir = scratch.dir(rel);
        scratch.write(&format!("{rel}/memory.max"), max);
        scratch.write(&format!("{rel}/memory.current"), current);
        if let Some(bytes) = inactive_file {
            scratch.write(
                &format!("{rel}/memory.stat"),
                &format!("anon 4096\nfile 8192\nactive_file 100\ninactive_file {bytes}\nslab 0\n"),
            );
        }
        dir
    }

    #[test]
    fn cgroup_v2_limit_usage_stat_and_psi() {
        let scratch = Scratch::new("cg2");
        let dir = v2_group(
            &scratch,
            "app",
            "1073741824\n",
            "536870912\n",
            Some(104_857_600),
        );
        scratch.write("app/memory.pressure", "some avg10=3.50 avg60=1.00 avg300=0.20 total=99\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
        let p = Cgroup::v2(&dir).sample().expect("sample");
        assert_eq!(p.total, GIB);
        assert_eq!(p.free_bytes, GIB - (512 << 20) + 104_857_600);
        assert_eq!((p.min, p.low, p.high), (GIB / 100, GIB / 80, GIB * 3 / 200));
        assert_eq!(p.psi_some_avg10, Some(3.5));
        assert_eq!(p.source, "cgroup-v2");
        // Over the limit (usage can pass it briefly): free is 0, not an underflow.
        let over = v2_group(&scratch, "over", "4096\n", "8192\n", None);
        assert_eq!(Cgroup::v2(&over).sample().expect("sample").free_bytes, 0);
    }

    #[test]
    fn cgroup_v2_max_is_no_limit() {
        let scratch = Scratch::new("cg2-max");
        let dir = v2_group(&scratch, "app", "max\n", "1\n", None);
        match Cgroup::v2(&dir).sample() {
            Err(PressureError::NoLimit { path }) => assert_eq!(path, dir),
            other => panic!("expected NoLimit, got {other:?}"),
        }
        // A directory with no limit file at all (the root group) is no limit either…
        let root = scratch.dir("root");
        assert!(matches!(
            Cgroup::v2(&root).sample(),
            Err(PressureError::NoLimit { .. })
        ));
        // …but a directory that does not exist is an I/O error.
        assert!(matches!(
            Cgroup::v2(scratch.0.join("gone")).sample(),
            Err(PressureError::Io { .. })
        ));
    }

    #[test]
    fn cgroup_v2_malformed_names_file_and_line() {
        let scratch = Scratch::new("cg2-bad");
        let dir = v2_group(&scratch, "a", "12 GB\n", "1\n", None);
        assert_parse_error(
            Cgroup::v2(&dir).sample().expect_err("max"),
            &dir.join("memory.max"),
            1,
        );
        let dir = v2_group(&scratch, "b", "4096\n", "-1\n", None);
        assert_parse_error(
            Cgroup::v2(&dir).sample().expect_err("current"),
            &dir.join("memory.current"),
            1,
        );
        let dir = v2_group(&scratch, "c", "4096\n", "1\n", None);
        scratch.write("c/memory.stat", "anon 1\ninactive_file\n");
        assert_parse_error(
            Cgroup::v2(&dir).sample().expect_err("stat"),
            &dir.join("memory.stat"),
            2,
        );
        let dir = v2_group(&scratch, "d", "4096\n", "1\n", None);
        scratch.write("d/memory.pressure", "some avg10=nan\n");
        assert_parse_error(
            Cgroup::v2(&dir).sample().expect_err("psi"),
            &dir.join("memory.pressure"),
            1,
        );
        // A limit but no usage file: I/O error naming memory.current.
        let dir = scratch.dir("e");
        scratch.write("e/memory.max", "4096\n");
        match Cgroup::v2(&dir).sample() {
            Err(PressureError::Io { path, .. }) => assert_eq!(path, dir.join("memory.current")),
            other => panic!("expected Io, got {other:?}"),
        }
    }

    #[test]
    fn cgroup_v1_limit_and_huge_limit() {
        let scratch = Scratch::new("cg1");
        let dir = scratch.dir("grp");
        scratch.write("grp/memory.limit_in_bytes", "2147483648\n");
        scratch.write("grp/memory.usage_in_bytes", "1073741824\n");
        scratch.write(
            "grp/memory.stat",
            "cache 10\ninactive_file 1\ntotal_inactive_file 1048576\n",
        );
        let p = Cgroup::v1(&dir).sample().expect("sample");
        assert_eq!(p.total, 2 * GIB);
        assert_eq!(
            p.free_bytes,
            GIB + (1 << 20),
            "the hierarchical total_inactive_file wins"
        );
        assert_eq!(p.psi_some_avg10, None);
        assert_eq!(p.source, "cgroup-v1");
        scratch.write("grp/memory.limit_in_bytes", "9223372036854771712\n");
        assert!(matches!(
            Cgroup::v1(&dir).sample(),
            Err(PressureError::NoLimit { .. })
        ));
        scratch.write("grp/memory.limit_in_bytes", "lots\n");
        assert_parse_error(
            Cgroup::v1(&dir).sample().expect_err("v1"),
            &dir.join("memory.limit_in_bytes"),
            1,
        );
    }

    #[test]
    fn cgroup_detect_v2_takes_the_tightest_ancestor() {
        let scratch = Scratch::new("cg-detect2");
        let root = scratch.dir("fs");
        scratch.write("fs/cgroup.controllers", "cpu memory\n");
        // The root group has no memory.max; `a` is limited to 1 GiB with 900 MiB used;
        // `a/b` (ours) has no limit of its own.
        v2_group(&scratch, "fs/a", "1073741824\n", "943718400\n", None);
        let leaf = v2_group(&scratch, "fs/a/b", "max\n", "10\n", None);
        scratch.write(
            "fs/a/b/memory.pressure",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        );
        let proc = scratch.write("self-cgroup", "0::/a/b\n");
        let mut cg = Cgroup::detect_in(&proc, &root).expect("detect");
        assert_eq!(cg.version(), CgroupVersion::V2);
        assert_eq!(cg.dirs(), &[leaf.clone(), root.join("a"), root.clone()]);
        let p = cg.sample().expect("sample");
        assert_eq!((p.total, p.free_bytes), (GIB, GIB - 943_718_400));
        assert_eq!(
            p.psi_some_avg10,
            Some(0.0),
            "PSI of the process's own group"
        );
        // Our own limit, if tighter, binds instead.
        scratch.write("fs/a/b/memory.max", "104857600\n");
        let p = cg.sample().expect("sample");
        assert_eq!((p.total, p.free_bytes), (104_857_600, 104_857_590));
        // A path that does not exist under the mount (a container's view): the mount.
        let proc = scratch.write("self-cgroup-elsewhere", "0::/elsewhere/x\n");
        let cg = Cgroup::detect_in(&proc, &root).expect("detect");
        assert_eq!(cg.dirs(), std::slice::from_ref(&root));
    }

    #[test]
    fn cgroup_detect_v1_hybrid_and_errors() {
        let scratch = Scratch::new("cg-detect1");
        let root = scratch.dir("fs");
        scratch.dir("fs/unified");
        let grp = scratch.dir("fs/memory/svc/job");
        scratch.write("fs/memory/memory.limit_in_bytes", "9223372036854771712\n");
        scratch.write(
            "fs/memory/svc/job/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        let proc = scratch.write(
            "self-cgroup",
            "9:name=systemd:/\n4:memory:/svc/job\n3:cpu,cpuacct:/\n0::/\n",
        );
        let mut cg = Cgroup::detect_in(&proc, &root).expect("detect");
        assert_eq!(cg.version(), CgroupVersion::V1);
        assert_eq!(
            cg.dirs(),
            &[grp.clone(), root.join("memory/svc"), root.join("memory")]
        );
        assert!(matches!(cg.sample(), Err(PressureError::NoLimit { path }) if path == grp));

        let proc = scratch.write("self-cgroup-bad", "4:memory\n");
        assert_parse_error(Cgroup::detect_in(&proc, &root).expect_err("bad"), &proc, 1);
        let proc = scratch.write("self-cgroup-escape", "0::/../../etc\n");
        assert_parse_error(
            Cgroup::detect_in(&proc, &root).expect_err("escape"),
            &proc,
            1,
        );
        let proc = scratch.write("self-cgroup-none", "3:cpu:/\n");
        assert!(matches!(
            Cgroup::detect_in(&proc, &root),
            Err(PressureError::NoCgroup { .. })
        ));
    }
}
