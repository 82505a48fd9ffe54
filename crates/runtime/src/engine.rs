//! Engines behind one trait, found by name in a [`Registry`]; the engines themselves, and the
//! registry that lists them, live in `cleave-engines`. Nothing here names an engine or a
//! model format: which engine runs which format, and which is preferred, is registered.

use std::collections::BTreeMap;
use std::num::NonZeroU16;
use std::path::Path;

use crate::cancel::Cancel;
use crate::error::RuntimeError;
use crate::tensor::{HostTensor, TensorView};

/// A loaded model, ready to run. Inputs and outputs are by tensor name.
pub trait Session: Send {
    fn run(
        &mut self,
        inputs: &[(String, HostTensor)],
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError>;

    /// For an engine that builds its plan at the first run: whether it can build one for the
    /// model as its file declares it, so that a part it cannot run is known before any input
    /// (`Unsupported`). An engine that built everything at load has nothing more to say.
    fn precheck(&mut self) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// Runs once as `run`, unless `cancel` is cancelled: before the run starts it does not
    /// start; during it, an engine that can stop a run in progress stops it (`cancellable`).
    /// Either way the call fails with [`RuntimeError::Cancelled`].
    fn run_cancellable(
        &mut self,
        inputs: &[(String, HostTensor)],
        cancel: &Cancel,
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        if cancel.is_cancelled() {
            return Err(RuntimeError::Cancelled);
        }
        self.run(inputs)
    }

    /// Runs once on tensors the caller owns (`cancel` as in `run_cancellable`): an engine
    /// that can reads them in place; the others get copies.
    fn run_views(
        &mut self,
        inputs: &[(&str, TensorView<'_>)],
        cancel: Option<&Cancel>,
    ) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        let owned: Vec<(String, HostTensor)> = inputs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_host()))
            .collect();
        match cancel {
            Some(c) => self.run_cancellable(&owned, c),
            None => self.run(&owned),
        }
    }

    /// Whether `run_cancellable` stops a run in progress, not only one not yet started.
    fn cancellable(&self) -> bool {
        false
    }

    /// Where a load asked for a GPU (`LoadOptions::gpu`): the GPU it runs on, or why it runs
    /// on the CPU instead. `None`: the engine has no GPU to offer, or none was asked.
    fn gpu(&self) -> Option<Result<u32, String>> {
        None
    }
}

/// How many threads an engine may run one model on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Threads {
    /// The engine's own choice (all cores, for the engines that thread).
    #[default]
    Any,
    /// At most this many (an engine without a thread setting runs as it always does).
    Exactly(NonZeroU16),
}

impl Threads {
    pub const ONE: Threads = Threads::Exactly(NonZeroU16::MIN);

    /// One thread (pipelined workers, which must not compete for cores), or the engine's choice.
    pub fn single(one: bool) -> Threads {
        if one {
            Threads::ONE
        } else {
            Threads::Any
        }
    }

    /// `n` threads; 0 is the engine's choice, and counts past 65535 are capped there.
    pub fn count(n: usize) -> Threads {
        match NonZeroU16::new(u16::try_from(n).unwrap_or(u16::MAX)) {
            Some(n) => Threads::Exactly(n),
            None => Threads::Any,
        }
    }

    /// The count asked for, 0 for the engine's choice (as the isolate wire carries it).
    pub fn get(self) -> u16 {
        match self {
            Threads::Any => 0,
            Threads::Exactly(n) => n.get(),
        }
    }
}

/// How an engine loads a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LoadOptions {
    pub threads: Threads,
    /// Let the engine rewrite the graph for speed (fusions), as served parts want; off, an
    /// engine that can keeps the graph as written, so the tensors `verify` compares between
    /// parts and whole are computed the same way.
    pub optimize: bool,
    /// Run on this GPU (the process's device ordinal) where the engine can; one that
    /// cannot runs as it always does, and its session says why (`Session::gpu`).
    pub gpu: Option<u32>,
}

pub trait Engine: Send + Sync {
    fn name(&self) -> &'static str;

    /// Loads a model as `opts` says.
    fn load_with(&self, model: &Path, opts: LoadOptions) -> Result<Box<dyn Session>, RuntimeError>;

    /// Loads a model as written. `single_thread` keeps the engine on one core (pipelined
    /// workers).
    fn load(&self, model: &Path, single_thread: bool) -> Result<Box<dyn Session>, RuntimeError> {
        self.load_with(
            model,
            LoadOptions {
                threads: Threads::single(single_thread),
                optimize: false,
                gpu: None,
            },
        )
    }

    /// The dims of every tensor of `model`'s main graph after one run on `inputs` (given in
    /// the graph's input order), in the file's tensor order (`None` for a tensor it does not
    /// show), where the engine can show them (an interpreter that keeps each tensor's dims);
    /// `None` where it cannot, and the caller makes the tensors it wants outputs instead.
    fn tensor_dims(
        &self,
        model: &Path,
        inputs: &[HostTensor],
    ) -> Result<Option<Vec<Option<Vec<i64>>>>, RuntimeError> {
        let _ = (model, inputs);
        Ok(None)
    }
}

/// An engine as `--engine` names it: a registered engine, with the device for an engine
/// that has devices (`openvino:GPU`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EngineKind {
    name: &'static str,
    device: Option<String>,
}

impl EngineKind {
    /// The registered name, e.g. `ort`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The device, for an engine that has devices.
    pub fn device(&self) -> Option<&str> {
        self.device.as_deref()
    }

    /// The name with the device where there is one: `openvino:GPU`.
    pub fn label(&self) -> String {
        match &self.device {
            Some(d) => format!("{}:{d}", self.name),
            None => self.name.to_string(),
        }
    }
}

/// Makes a registered engine, on `device` for an engine that has devices.
pub type MakeEngine = fn(device: Option<&str>) -> Result<Box<dyn Engine>, RuntimeError>;

/// One engine as the registry knows it.
#[derive(Clone)]
pub struct EngineEntry {
    pub name: &'static str,
    /// Other names `--engine` accepts for it.
    pub aliases: &'static [&'static str],
    /// The model formats it loads, as part files name them (their extension, or the format
    /// the connection file records).
    pub formats: &'static [&'static str],
    /// The formats whose models it runs unless told otherwise.
    pub default_for: &'static [&'static str],
    /// Whether it is tried, in registration order, to run a whole model (constant folding,
    /// feeding a profile): engines that are cheap to start and need no device.
    pub whole_model: bool,
    /// For an engine with devices: the device it runs on unless `NAME:DEVICE` says, and the
    /// backend prefix that names one of its devices (`ov-` in `ov-GPU`).
    pub devices: Option<Devices>,
    /// The library it loads from a Python package, where it does.
    pub library: Option<&'static PackagedLibrary>,
    pub make: MakeEngine,
}

/// An engine's library as a Python wheel ships it: named by an environment variable, else
/// found in the package's folder. Both faces find it from this alone (the Python package
/// without starting a Python).
#[derive(Clone, Copy, Debug)]
pub struct PackagedLibrary {
    /// The variable that names the library itself (`CLEAVE_LITERT_LIB`).
    pub variable: &'static str,
    /// The package to look in (`ai_edge_litert`).
    pub package: &'static str,
    /// The library's path inside the package; its file name is a prefix, for versioned
    /// libraries (`capi/libonnxruntime.so` finds `libonnxruntime.so.1.31.1`).
    pub file: &'static str,
    /// What to `pip install` for it.
    pub wheel: &'static str,
}

/// How an engine with devices is named.
#[derive(Clone, Copy, Debug)]
pub struct Devices {
    pub default: &'static str,
    pub backend_prefix: &'static str,
    /// What the text after `NAME:` is, in messages: `DEVICE`, or `BACKENDS` for onert.
    pub what: &'static str,
}

/// The engines a program links.
#[derive(Clone, Default)]
pub struct Registry {
    entries: Vec<EngineEntry>,
}

impl Registry {
    pub fn register(&mut self, entry: EngineEntry) {
        self.entries.push(entry);
    }

    pub fn entries(&self) -> &[EngineEntry] {
        &self.entries
    }

    fn entry(&self, name: &str) -> Option<&EngineEntry> {
        self.entries
            .iter()
            .find(|e| e.name == name || e.aliases.contains(&name))
    }

    /// The names `--engine` accepts, for messages: `tract, ort, openvino[:DEVICE]`.
    pub fn names(&self) -> String {
        self.entries
            .iter()
            .map(|e| match e.devices {
                Some(d) => format!("{}[:{}]", e.name, d.what),
                None => e.name.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `NAME` (an engine with devices on its default device) or `NAME:DEVICE`.
    pub fn parse(&self, s: &str) -> Option<EngineKind> {
        let (name, device) = match s.split_once(':') {
            Some((n, d)) => (n, Some(d)),
            None => (s, None),
        };
        let e = self.entry(name)?;
        let device = match (e.devices, device) {
            (None, None) => None,
            (Some(d), None) => Some(d.default.to_string()),
            (Some(_), Some(d)) if valid_device(d) => Some(d.to_string()),
            _ => return None,
        };
        Some(EngineKind {
            name: e.name,
            device,
        })
    }

    /// Makes the engine of `kind`.
    pub fn make(&self, kind: &EngineKind) -> Result<Box<dyn Engine>, RuntimeError> {
        let e = self
            .entry(kind.name)
            .ok_or_else(|| RuntimeError::Unavailable {
                engine: kind.name,
                message: "not registered".into(),
            })?;
        (e.make)(kind.device())
    }

    /// The engine that runs a whole model of `format` unless told otherwise.
    pub fn default_for(&self, format: &str) -> Option<EngineKind> {
        self.entries
            .iter()
            .find(|e| e.default_for.contains(&format))
            .map(|e| self.kind_of(e))
    }

    /// The engines tried in turn to run a whole model of `format`, preferred first.
    pub fn candidates(&self, format: &str) -> Vec<EngineKind> {
        self.entries
            .iter()
            .filter(|e| e.whole_model && e.formats.contains(&format))
            .map(|e| self.kind_of(e))
            .collect()
    }

    fn kind_of(&self, e: &EngineEntry) -> EngineKind {
        EngineKind {
            name: e.name,
            device: e.devices.map(|d| d.default.to_string()),
        }
    }

    /// The engine a backend's name itself calls for: a device of an engine with devices
    /// (`ov-GPU`), or an engine of that name that runs `format` (a backend called `ort`).
    fn named_by_backend(&self, backend: &str, format: &str) -> Option<EngineKind> {
        self.by_device_prefix(backend).or_else(|| {
            self.entries
                .iter()
                .find(|e| e.devices.is_none() && e.name == backend && e.formats.contains(&format))
                .map(|e| self.kind_of(e))
        })
    }

    /// The engine, on a device, that a backend names by a registered prefix (`ov-GPU`: OpenVINO
    /// on GPU), whatever the format: what the connection file records as the part's engine.
    pub fn by_device_prefix(&self, backend: &str) -> Option<EngineKind> {
        for e in &self.entries {
            if let Some(d) = e.devices {
                if let Some(device) = backend.strip_prefix(d.backend_prefix) {
                    if !device.is_empty() {
                        return Some(EngineKind {
                            name: e.name,
                            device: Some(device.to_string()),
                        });
                    }
                }
            }
        }
        None
    }

    /// The engines to try in turn for a part served alone (`cleave serve`, Ray's part
    /// actors): the engine the connection file records, else the one the backend's name
    /// calls for, else every engine that runs whole models of `format`, preferred first
    /// (ONNX Runtime before tract: it threads), then the format's default.
    pub fn served_order(
        &self,
        backend: &str,
        format: &str,
        recorded: Option<&str>,
    ) -> Result<Vec<EngineKind>, String> {
        if let Some(e) = recorded {
            return self
                .parse(e)
                .map(|k| vec![k])
                .ok_or_else(|| format!("unknown engine '{e}' (engines: {})", self.names()));
        }
        if let Some(k) = self.named_by_backend(backend, format) {
            return Ok(vec![k]);
        }
        let mut order = self.candidates(format);
        if let Some(d) = self.default_for(format) {
            if !order.contains(&d) {
                order.push(d);
            }
        }
        if order.is_empty() {
            return Err(format!(
                "no engine runs {format} parts (engines: {})",
                self.names()
            ));
        }
        Ok(order)
    }

    /// A map from backends to engines with no choice made yet.
    pub fn map(&'static self) -> EngineMap {
        EngineMap {
            registry: self,
            map: BTreeMap::new(),
        }
    }

    /// The map `(backend, engine)` pairs ask for; where an engine is unknown, the pair's index
    /// and why.
    pub fn parse_map(
        &'static self,
        pairs: &[(String, String)],
    ) -> Result<EngineMap, (usize, String)> {
        let mut m = self.map();
        for (k, (b, e)) in pairs.iter().enumerate() {
            let kind = self.parse(e.trim()).ok_or_else(|| {
                (
                    k,
                    format!("unknown engine '{e}' (engines: {})", self.names()),
                )
            })?;
            m.map.insert(b.trim().to_string(), kind);
        }
        Ok(m)
    }
}

/// Device names: `CPU`, `GPU.1`, `HETERO:GPU,CPU`, `ruy;cpu` are letters, digits and `.:,;_-`.
fn valid_device(d: &str) -> bool {
    !d.is_empty()
        && d.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | ',' | ';' | '_' | '-'))
}

/// The format of a part file: what the connection file records, else its extension.
pub fn part_format(file: &Path, recorded: Option<&str>) -> String {
    match recorded {
        Some(f) => f.to_ascii_lowercase(),
        None => file
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default(),
    }
}

/// Which engine runs each backend (`--engine npu=tract,cpu=ort`); where it says nothing, a
/// backend that names an engine or one of its devices runs there, and any other on the
/// default engine of the part's format.
#[derive(Clone)]
pub struct EngineMap {
    registry: &'static Registry,
    map: BTreeMap<String, EngineKind>,
}

impl std::fmt::Debug for EngineMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.map.iter().map(|(b, k)| (b, k.label())))
            .finish()
    }
}

impl EngineMap {
    pub fn registry(&self) -> &'static Registry {
        self.registry
    }

    /// The engine for parts of `format` on `backend`.
    pub fn for_part(&self, backend: &str, format: &str) -> Result<EngineKind, String> {
        if let Some(kind) = self.map.get(backend) {
            return Ok(kind.clone());
        }
        let r = self.registry;
        r.named_by_backend(backend, format)
            .or_else(|| r.default_for(format))
            .ok_or_else(|| {
                format!(
                    "no engine runs {format} parts on backend {backend} (engines: {})",
                    r.names()
                )
            })
    }

    /// Whether `kind` is the part's engine only by default: neither `--engine`, nor the
    /// connection file, nor the backend's name chose it.
    pub fn is_default(
        &self,
        backend: &str,
        format: &str,
        recorded: Option<&str>,
        kind: &EngineKind,
    ) -> bool {
        !self.map.contains_key(backend)
            && recorded.is_none()
            && self.registry.named_by_backend(backend, format).is_none()
            && self.registry.default_for(format).as_ref() == Some(kind)
    }

    /// The engine for a part of a connection file: `--engine`'s choice for its backend,
    /// else the engine the file records for the part, else [`EngineMap::for_part`]'s.
    pub fn for_conn_part(
        &self,
        backend: &str,
        file: &Path,
        format: &str,
        recorded: Option<&str>,
    ) -> Result<EngineKind, String> {
        if let Some(kind) = self.map.get(backend) {
            return Ok(kind.clone());
        }
        match recorded {
            Some(e) => self.registry.parse(e).ok_or_else(|| {
                format!(
                    "part {}: unknown engine '{e}' (engines: {})",
                    file.display(),
                    self.registry.names()
                )
            }),
            None => self.for_part(backend, format),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(backend: &str, engine: &str) -> (String, String) {
        (backend.to_string(), engine.to_string())
    }

    fn make(_: Option<&str>) -> Result<Box<dyn Engine>, RuntimeError> {
        Err(RuntimeError::Unavailable {
            engine: "test",
            message: "a test registry makes nothing".into(),
        })
    }

    fn entry(name: &'static str, formats: &'static [&'static str]) -> EngineEntry {
        EngineEntry {
            name,
            aliases: &[],
            formats,
            default_for: &[],
            whole_model: true,
            devices: None,
            library: None,
            make,
        }
    }

    fn registry() -> &'static Registry {
        static R: std::sync::OnceLock<Registry> = std::sync::OnceLock::new();
        R.get_or_init(|| {
            let mut r = Registry::default();
            r.register(EngineEntry {
                aliases: &["fast-alias"],
                ..entry("fast", &["fa"])
            });
            r.register(EngineEntry {
                default_for: &["fa"],
                ..entry("slow", &["fa"])
            });
            r.register(EngineEntry {
                default_for: &["fb"],
                ..entry("flat", &["fb"])
            });
            r.register(EngineEntry {
                whole_model: false,
                devices: Some(Devices {
                    default: "CPU",
                    backend_prefix: "dv-",
                    what: "DEVICE",
                }),
                ..entry("dev", &["fa", "fb"])
            });
            r
        })
    }

    fn kind(s: &str) -> EngineKind {
        registry().parse(s).unwrap()
    }

    #[test]
    fn defaults_and_candidates_come_from_the_registrations() {
        let r = registry();
        assert_eq!(r.default_for("fa"), Some(kind("slow")));
        assert_eq!(r.default_for("fb"), Some(kind("flat")));
        assert_eq!(r.default_for("fc"), None);
        assert_eq!(r.candidates("fa"), [kind("fast"), kind("slow")]);
        assert_eq!(r.candidates("fb"), [kind("flat")]);
        assert_eq!(r.parse("fast-alias"), Some(kind("fast")));
        assert_eq!(r.names(), "fast, slow, flat, dev[:DEVICE]");
    }

    #[test]
    fn a_served_part_tries_the_recorded_engine_else_the_backends_else_its_formats_in_order() {
        let r = registry();
        // Whole-model engines first (the preferred one leads), then the format's default.
        assert_eq!(
            r.served_order("npu", "fa", None),
            Ok(vec![kind("fast"), kind("slow")])
        );
        assert_eq!(r.served_order("npu", "fb", None), Ok(vec![kind("flat")]));
        assert_eq!(
            r.served_order("dv-GPU", "fa", None),
            Ok(vec![kind("dev:GPU")])
        );
        assert_eq!(r.served_order("fast", "fa", None), Ok(vec![kind("fast")]));
        assert_eq!(
            r.served_order("npu", "fa", Some("dev:NPU")),
            Ok(vec![kind("dev:NPU")])
        );
        let e = r.served_order("npu", "fa", Some("nope")).unwrap_err();
        assert!(e.contains("unknown engine 'nope'"), "{e}");
        let e = r.served_order("npu", "fc", None).unwrap_err();
        assert!(e.contains("no engine runs fc parts"), "{e}");
    }

    #[test]
    fn backends_map_to_engines_by_override_name_device_or_format() {
        let r = registry();
        let m = r.map();
        assert_eq!(m.for_part("npu", "fa"), Ok(kind("slow")));
        assert_eq!(m.for_part("npu", "fb"), Ok(kind("flat")));
        assert_eq!(m.for_part("fast", "fa"), Ok(kind("fast")));
        // A backend named like an engine that does not run the format gets the default.
        assert_eq!(m.for_part("fast", "fb"), Ok(kind("flat")));
        assert_eq!(m.for_part("dv-GPU", "fb"), Ok(kind("dev:GPU")));
        assert_eq!(m.for_part("dv-", "fa"), Ok(kind("slow")));
        let e = m.for_part("npu", "fc").unwrap_err();
        assert!(e.contains("no engine runs fc parts"), "{e}");
        let m = r
            .parse_map(&[pair("npu", "fast"), pair("dv-GPU", "dev:NPU")])
            .unwrap();
        assert_eq!(m.for_part("npu", "fb"), Ok(kind("fast")));
        assert_eq!(m.for_part("dv-GPU", "fa"), Ok(kind("dev:NPU")));
        let p = Path::new("m.00001_x.fa");
        assert_eq!(
            m.for_conn_part("x", p, "fa", Some("dev:GPU")),
            Ok(kind("dev:GPU"))
        );
        assert!(m.for_conn_part("x", p, "fa", Some("nope")).is_err());
        let (at, e) = r.parse_map(&[pair("npu", "fst")]).unwrap_err();
        assert!(at == 0 && e.contains("dev[:DEVICE]"), "{e}");
        assert_eq!(r.parse("dev"), Some(kind("dev:CPU")));
        assert_eq!(r.parse("dev:"), None);
        assert_eq!(r.parse("dev:a b"), None);
        assert_eq!(r.parse("fast:GPU"), None);
        assert_eq!(kind("dev:NPU").label(), "dev:NPU");
        assert_eq!(part_format(Path::new("a/m.FA"), None), "fa");
        assert_eq!(part_format(Path::new("a/m.fa"), Some("fb")), "fb");
    }
}
