//! [`Scripted`]: a fixed trace of samples, for tests and replays.

use super::{Pressure, PressureError, PressureSource};

/// A fixed list of samples, for tests and replays.
///
/// [`Scripted::new`] gives each sample once, then [`PressureError::Exhausted`]
/// forever: a test that takes more rounds than it scripted fails loudly instead of
/// silently replaying. [`Scripted::cycling`] starts over after the last sample (an
/// empty cycle is exhausted at once).
#[derive(Clone, Debug)]
pub struct Scripted {
    samples: Vec<Pressure>,
    next: usize,
    cycle: bool,
}

impl Scripted {
    /// Gives `samples` in order, once.
    pub fn new(samples: Vec<Pressure>) -> Self {
        Scripted {
            samples,
            next: 0,
            cycle: false,
        }
    }

    /// Gives `samples` in order, over and over.
    pub fn cycling(samples: Vec<Pressure>) -> Self {
        Scripted {
            samples,
            next: 0,
            cycle: true,
        }
    }

    /// Samples left before exhaustion (`None` for a non-empty cycle: never).
    pub fn remaining(&self) -> Option<usize> {
        if self.cycle && !self.samples.is_empty() {
            None
        } else {
            Some(self.samples.len().saturating_sub(self.next))
        }
    }
}

impl PressureSource for Scripted {
    fn sample(&mut self) -> Result<Pressure, PressureError> {
        if self.cycle && self.next >= self.samples.len() {
            self.next = 0;
        }
        let Some(sample) = self.samples.get(self.next) else {
            return Err(PressureError::Exhausted {
                samples: self.samples.len(),
            });
        };
        self.next += 1;
        Ok(sample.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(free_bytes: u64) -> Pressure {
        Pressure {
            free_bytes,
            min: 1,
            low: 2,
            high: 3,
            total: 100,
            psi_some_avg10: None,
            source: "scripted",
        }
    }

    #[test]
    fn scripted_ends_or_cycles() {
        let mut once = Scripted::new(vec![sample(1), sample(2)]);
        assert_eq!(once.remaining(), Some(2));
        assert_eq!(once.sample().expect("1").free_bytes, 1);
        assert_eq!(once.sample().expect("2").free_bytes, 2);
        assert_eq!(once.remaining(), Some(0));
        for _ in 0..3 {
            assert!(matches!(
                once.sample(),
                Err(PressureError::Exhausted { samples: 2 })
            ));
        }
        let mut cycle = Scripted::cycling(vec![sample(1), sample(2)]);
        let seen: Vec<u64> = (0..5)
            .map(|_| cycle.sample().expect("cycle").free_bytes)
            .collect();
        assert_eq!(seen, [1, 2, 1, 2, 1]);
        assert_eq!(cycle.remaining(), None);
        let mut empty = Scripted::cycling(Vec::new());
        assert!(matches!(
            empty.sample(),
            Err(PressureError::Exhausted { samples: 0 })
        ));
        // Through a trait object.
        let mut boxed: Box<dyn PressureSource> = Box::new(Scripted::new(vec![sample(7)]));
        assert_eq!(boxed.sample().expect("boxed").free_bytes, 7);
    }
}
