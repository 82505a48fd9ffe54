//! Engines behind a guard: a panic inside an engine (tract asserts on shapes it cannot
//! handle, e.g. a `ConstantOfShape` of `[-5, 4]`) becomes an error naming the model and the
//! engine instead of ending the process (exit 101) or crossing into Python.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;

use cleave_runtime::{Engine, HostTensor, LoadOptions, RuntimeError, Session};

thread_local! {
    /// Set while this thread is inside a guarded engine call: its panics are reported as
    /// errors, so the default hook's message would only repeat them.
    static GUARDED: Cell<bool> = const { Cell::new(false) };
}

static HOOK: Once = Once::new();

/// Installs, once, a panic hook that stays quiet for guarded calls and defers to the
/// previous hook for every other panic.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Runs `f` with panics turned into [`RuntimeError::Engine`] about `path`.
fn guarded<T>(
    engine: &'static str,
    path: &Path,
    f: impl FnOnce() -> Result<T, RuntimeError>,
) -> Result<T, RuntimeError> {
    install_hook();
    let was = GUARDED.with(|g| g.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(was));
    result.unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("no message");
        Err(RuntimeError::Engine {
            path: path.to_path_buf(),
            engine,
            message: format!(
                "the engine panicked ({what}); the model asks for something it cannot do"
            ),
        })
    })
}

/// An engine whose loads and runs are guarded.
pub struct Guarded(pub Box<dyn Engine>);

struct GuardedSession {
    inner: Box<dyn Session>,
    engine: &'static str,
    path: PathBuf,
}

impl Engine for Guarded {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn tensor_dims(
        &self,
        model: &Path,
        inputs: &[HostTensor],
    ) -> Result<Option<Vec<Option<Vec<i64>>>>, RuntimeError> {
        guarded(self.0.name(), model, || self.0.tensor_dims(model, inputs))
    }

    fn load_with(&self, model: &Path, opts: LoadOptions) -> Result<Box<dyn Session>, RuntimeError> {
        let engine = self.0.name();
        let inner = guarded(engine, model, || self.0.load_with(model, opts))?;
        Ok(Box::new(GuardedSession {
            inner,
            engine,
            path: model.to_path_buf(),
        }))
    }
}

impl Session for GuardedSession {
    fn run(
        &mut self,
        inputs: &[(String, HostTensor)],
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        let inner = &mut self.inner;
        guarded(self.engine, &self.path, || inner.run(inputs))
    }

    fn precheck(&mut self) -> Result<(), RuntimeError> {
        let inner = &mut self.inner;
        guarded(self.engine, &self.path, || inner.precheck())
    }

    fn run_cancellable(
        &mut self,
        inputs: &[(String, HostTensor)],
        cancel: &cleave_runtime::Cancel,
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        let inner = &mut self.inner;
        guarded(self.engine, &self.path, || {
            inner.run_cancellable(inputs, cancel)
        })
    }

    fn run_views(
        &mut self,
        inputs: &[(&str, cleave_runtime::TensorView<'_>)],
        cancel: Option<&cleave_runtime::Cancel>,
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        let inner = &mut self.inner;
        guarded(self.engine, &self.path, || inner.run_views(inputs, cancel))
    }

    fn cancellable(&self) -> bool {
        self.inner.cancellable()
    }

    fn gpu(&self) -> Option<Result<u32, String>> {
        self.inner.gpu()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Panics;
    impl Engine for Panics {
        fn name(&self) -> &'static str {
            "panics"
        }
        fn load_with(&self, _: &Path, _: LoadOptions) -> Result<Box<dyn Session>, RuntimeError> {
            panic!("assertion failed: dim >= 0")
        }
    }

    #[test]
    fn a_panic_in_an_engine_is_an_error_naming_the_model() {
        let e = Guarded(Box::new(Panics))
            .load(Path::new("m.onnx"), false)
            .err()
            .map(|e| (e.path().map(Path::to_path_buf), e.to_string()));
        let (path, text) = e.unwrap_or_default();
        assert_eq!(path.as_deref(), Some(Path::new("m.onnx")));
        assert!(
            text.contains("panics cannot run it: the engine panicked (assertion failed: dim >= 0)"),
            "{text}"
        );
        // Later panics elsewhere still reach the previous hook (and are not caught).
        assert!(!GUARDED.with(Cell::get));
    }
}
