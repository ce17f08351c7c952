//! Recovery: the live set an allocation log describes, and the records a crash
//! left undecided, replayed without relying on the order of positions across
//! threads (each arena appends into its own chunks of the log).
//!
//! The rules, each tied to what a crash can leave behind:
//!
//! * A `Run` record makes its pages a run of its class. Small runs are retired only
//!   by a checkpoint, so two live `Run` records never cover one page; if they do,
//!   the log is corrupt.
//! * An `Obj` record counts unless it is excluded or a `Del` names its position.
//!   One longer than the largest small class is a large object on pages of its
//!   own; a small one must start a slot of the run covering it.
//! * A small `Obj` with no `Run` covering it is an allocation whose group of
//!   records persisted only in part (the word model tears a line's words apart):
//!   its operation never returned, so it is dropped — and excluded on the media,
//!   so that a run later created over its pages does not bring it back.
//! * An `Obj` with the publish-pending bit is an `alloc_publish` that never
//!   finished: it counts, and its pending bit is cleared, exactly when the slot
//!   its `Pub` record (the word before it) names holds the object; otherwise it
//!   is excluded (the slot never took it, so it is left unchanged).

use std::collections::HashSet;

use pmem_core::AllocError;

use crate::classes::{large_pages, Class, MAX_SMALL};
use crate::record::{excluded, published, Record, PAGE};
use crate::run::RunKind;

/// A run with the objects that survive in it.
#[derive(Debug)]
pub struct RecoveredRun {
    /// First heap page.
    pub first_page: u64,
    /// Pages.
    pub pages: u64,
    /// Small class or large.
    pub kind: RunKind,
    /// Position of its `Run` record (small runs).
    pub run_pos: Option<u64>,
    /// Live objects: heap offset, record position and recorded length.
    pub objects: Vec<(u64, u64, u64)>,
}

/// What the log holds once the crash's loose ends are decided.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Runs, in page order.
    pub runs: Vec<RecoveredRun>,
    /// Words to store at positions (exclusions and cleared pending bits), to make
    /// the decisions durable.
    pub fixes: Vec<(u64, u64)>,
}

fn corrupt(reason: String) -> AllocError {
    AllocError::Corrupt { reason }
}

/// Replays `records` (position, record, word) of a heap of `heap_pages` pages
/// starting at pool offset `heap_start`. `slot_holds(slot, block)` tells whether
/// the publication slot at pool offset `slot` holds the pool offset `block`.
pub fn replay(
    records: &[(u64, Record, u64)],
    heap_start: u64,
    heap_pages: u64,
    mut slot_holds: impl FnMut(u64, u64) -> Result<bool, AllocError>,
) -> Result<Replayed, AllocError> {
    let deleted: HashSet<u64> = records
        .iter()
        .filter_map(|(_, r, _)| match r {
            Record::Del { position } => Some(*position),
            _ => None,
        })
        .collect();
    // Every page's owner: 1 + the index in `runs` of the run or large object on
    // it (0: none). Vectors, not maps: recovering a million objects looks a page
    // up a million times.
    let mut owner: Vec<u64> = vec![0; usize::try_from(heap_pages).unwrap_or(0)];
    let mut runs: Vec<RecoveredRun> = Vec::new();
    // Per run, the slots taken so far (a run has at most 256 slots).
    let mut taken: Vec<[u64; 4]> = Vec::new();
    let mut claim = |first: u64, pages: u64, index: usize, what: &str| -> Result<(), AllocError> {
        if first.checked_add(pages).is_none_or(|end| end > heap_pages) {
            return Err(corrupt(format!(
                "{what} at page {first} of {pages} pages runs past the heap's {heap_pages}"
            )));
        }
        let range = first as usize..(first + pages) as usize;
        if let Some(p) = owner[range.clone()].iter().position(|&o| o != 0) {
            return Err(corrupt(format!(
                "{what} at page {first} overlaps another at page {}",
                first + p as u64
            )));
        }
        owner[range].fill(index as u64 + 1);
        Ok(())
    };
    for (pos, r, _) in records {
        if let Record::Run {
            class,
            pages,
            first_page,
        } = *r
        {
            let c = Class::from_id(class)
                .ok_or_else(|| corrupt(format!("run record {pos}: no class {class}")))?;
            if pages != c.run_pages() {
                return Err(corrupt(format!(
                    "run record {pos}: {pages} pages for class {} B (runs have {})",
                    c.size(),
                    c.run_pages()
                )));
            }
            claim(first_page, pages, runs.len(), "a run")?;
            taken.push([0; 4]);
            runs.push(RecoveredRun {
                first_page,
                pages,
                kind: RunKind::Small(c),
                run_pos: Some(*pos),
                objects: Vec::new(),
            });
        }
    }
    let mut fixes = Vec::new();
    let mut small = Vec::new();
    for (i, (pos, r, word)) in records.iter().enumerate() {
        let Record::Obj {
            offset,
            len,
            exclude,
            pending,
        } = *r
        else {
            continue;
        };
        if exclude || (!deleted.is_empty() && deleted.contains(pos)) {
            continue;
        }
        if pending {
            let slot = match i.checked_sub(1).map(|j| &records[j]) {
                Some((p, Record::Pub { slot }, _)) if p + 1 == *pos => Some(*slot),
                _ => None,
            };
            let holds = match slot {
                Some(slot) => slot_holds(slot, heap_start + offset)?,
                None => false,
            };
            if !holds {
                fixes.push((*pos, excluded(*word)));
                continue;
            }
            fixes.push((*pos, published(*word)));
        }
        if len > MAX_SMALL {
            if !offset.is_multiple_of(PAGE) {
                return Err(corrupt(format!(
                    "large object record {pos} at {offset:#x} is not page aligned"
                )));
            }
            let first = offset / PAGE;
            claim(first, large_pages(len), runs.len(), "a large object")?;
            taken.push([0; 4]);
            runs.push(RecoveredRun {
                first_page: first,
                pages: large_pages(len),
                kind: RunKind::Large,
                run_pos: None,
                objects: vec![(offset, *pos, len)],
            });
        } else {
            small.push((*pos, offset, len, *word));
        }
    }
    for (pos, offset, len, word) in small {
        let index = owner
            .get((offset / PAGE) as usize)
            .filter(|&&o| o != 0)
            .map(|o| (o - 1) as usize)
            .filter(|&i| matches!(runs[i].kind, RunKind::Small(_)));
        let Some(index) = index else {
            // Its run's record never persisted: the allocation never returned.
            fixes.push((pos, excluded(word)));
            continue;
        };
        let run = &mut runs[index];
        let RunKind::Small(c) = run.kind else {
            continue;
        };
        let rel = offset - run.first_page * PAGE;
        if !rel.is_multiple_of(c.size()) || rel / c.size() >= c.slots() || len > c.size() {
            return Err(corrupt(format!(
                "object record {pos} ({len} B at {offset:#x}) is not a slot of the {} B run at page {}",
                c.size(),
                run.first_page
            )));
        }
        let slot = rel / c.size();
        let bits = &mut taken[index];
        let (w, b) = ((slot / 64) as usize, 1u64 << (slot % 64));
        if bits[w] & b != 0 {
            let other = run
                .objects
                .iter()
                .find(|o| o.0 == offset)
                .map_or(0, |o| o.1);
            return Err(corrupt(format!(
                "object records {other} and {pos} both hold {offset:#x}"
            )));
        }
        bits[w] |= b;
        run.objects.push((offset, pos, len));
    }
    Ok(Replayed {
        runs: {
            runs.sort_unstable_by_key(|r| r.first_page);
            runs
        },
        fixes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(r: Record) -> (Record, u64) {
        (r, r.encode().expect("record"))
    }

    fn log(rs: &[Record]) -> Vec<(u64, Record, u64)> {
        rs.iter()
            .enumerate()
            .map(|(p, r)| {
                let (r, w) = rec(*r);
                (p as u64, r, w)
            })
            .collect()
    }

    fn obj(offset: u64, len: u64) -> Record {
        Record::Obj {
            offset,
            len,
            exclude: false,
            pending: false,
        }
    }

    fn run64(first_page: u64) -> Record {
        Record::Run {
            class: Class::of(64).map(Class::id).unwrap_or(0),
            pages: 1,
            first_page,
        }
    }

    fn no_slot(_: u64, _: u64) -> Result<bool, AllocError> {
        Ok(false)
    }

    #[test]
    fn runs_objects_deletes_and_large_objects() {
        let l = log(&[
            run64(0),
            obj(0, 64),
            obj(64, 48),
            Record::Del { position: 1 },
            obj(PAGE, 8192),
        ]);
        let r = replay(&l, 4096, 16, no_slot).expect("replay");
        assert_eq!(r.runs.len(), 2);
        assert_eq!(r.runs[0].objects, vec![(64, 2, 48)]);
        assert_eq!(r.runs[1].kind, RunKind::Large);
        assert_eq!(r.runs[1].pages, 2);
        assert!(r.fixes.is_empty());
    }

    #[test]
    fn orphans_and_unfinished_publications_are_excluded() {
        let (_, w) = rec(obj(0, 64));
        let pending = Record::Obj {
            offset: 64,
            len: 64,
            exclude: false,
            pending: true,
        };
        let l = log(&[obj(0, 64), run64(1), Record::Pub { slot: 8 }, pending]);
        // The object at page 0 has no run: dropped and excluded.
        let r = replay(&l, 4096, 16, no_slot).expect("replay");
        assert!(r.fixes.contains(&(0, excluded(w))), "{:?}", r.fixes);
        // A publication in the run at page 1: it counts exactly when its slot
        // holds it.
        let pending = Record::Obj {
            offset: PAGE,
            len: 64,
            exclude: false,
            pending: true,
        };
        let l = log(&[run64(1), Record::Pub { slot: 8 }, pending]);
        let pw = pending.encode().expect("record");
        let r = replay(&l, 4096, 16, no_slot).expect("replay");
        assert_eq!(r.fixes, vec![(2, excluded(pw))]);
        assert!(r.runs[0].objects.is_empty());
        let r = replay(&l, 4096, 16, |slot, block| {
            Ok(slot == 8 && block == 4096 + PAGE)
        })
        .expect("replay");
        assert_eq!(r.fixes, vec![(2, published(pw))]);
        assert_eq!(r.runs[0].objects, vec![(PAGE, 2, 64)]);
    }

    #[test]
    fn overlaps_and_bad_slots_are_corrupt() {
        for bad in [
            vec![run64(0), run64(0)],
            vec![run64(0), obj(0, 8192)],
            vec![run64(0), obj(16, 64)],
            vec![run64(0), obj(0, 64), obj(0, 64)],
            vec![obj(0, 4096 * 20)],
            vec![Record::Run {
                class: 1,
                pages: 3,
                first_page: 0,
            }],
        ] {
            assert!(
                matches!(
                    replay(&log(&bad), 4096, 16, no_slot),
                    Err(AllocError::Corrupt { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
