//! The serving flags, declared once for both faces in the Python package's
//! `serve/flags.json`: clap builds them here from that file, argparse in `serve/cli.py`.
//! What a user gives is handed on to the application unchanged, which applies the defaults.

use std::ffi::OsString;
use std::marker::PhantomData;
use std::sync::OnceLock;

use clap::builder::{PossibleValuesParser, ValueParser};
use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use serde::Deserialize;

const DECLARED: &str = include_str!("../../../python/cleave/serve/flags.json");

#[derive(Deserialize, Debug)]
#[serde(rename_all = "kebab-case")]
enum Kind {
    Text,
    Port,
    PortOrOff,
    Seconds,
    Count,
    Switch,
    Choice,
}

#[derive(Deserialize, Debug)]
pub struct Flag {
    flag: String,
    value: Option<String>,
    kind: Kind,
    help: String,
    #[serde(default)]
    choices: Vec<String>,
    default: Option<String>,
}

#[derive(Deserialize, Debug)]
pub struct Table {
    deploy: Vec<Flag>,
    route: Vec<Flag>,
    cluster: Vec<Flag>,
    serve: Vec<Flag>,
    bench: Vec<Flag>,
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    // Compiled in, and parsed by a unit test: a broken file never reaches a user.
    TABLE.get_or_init(|| match serde_json::from_str(DECLARED) {
        Ok(t) => t,
        Err(e) => panic!("python/cleave/serve/flags.json: {e}"),
    })
}

/// A group of the table, as a command takes it whole.
pub trait Section {
    fn flags(t: &'static Table) -> &'static [Flag];
    /// The argument each flag needs beside it (`bench`'s need `--ray`).
    const REQUIRES: Option<&'static str> = None;
}

macro_rules! section {
    ($(#[$doc:meta])* $name:ident, $field:ident $(, $requires:literal)?) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default)]
        pub struct $name;
        impl Section for $name {
            fn flags(t: &'static Table) -> &'static [Flag] {
                &t.$field
            }
            $(const REQUIRES: Option<&'static str> = Some($requires);)?
        }
    };
}

section!(
    /// How the parts are deployed: every command that deploys.
    Deploy, deploy
);
section!(
    /// The application's name and HTTP route.
    Route, route
);
section!(
    /// Waiting on the cluster and on requests.
    Cluster, cluster
);
section!(
    /// `serve`'s own.
    Serve, serve
);
section!(
    /// `bench --ray`'s own.
    Bench, bench, "ray"
);

/// The flags of one section a user gave, in the table's order.
#[derive(Debug, Clone, Default)]
pub struct Flags<S> {
    given: Vec<(&'static str, Option<String>)>,
    section: PhantomData<S>,
}

impl<S: Section> Flags<S> {
    /// The application's own flags for these settings.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut out = Vec::new();
        for (flag, value) in &self.given {
            out.push(format!("--{flag}").into());
            if let Some(v) = value {
                out.push(v.into());
            }
        }
        out
    }

    pub fn any(&self) -> bool {
        !self.given.is_empty()
    }

    /// The section's flags as a user types them, for a message: `--a, --b and --c`.
    pub fn names() -> String {
        let all: Vec<String> = S::flags(table())
            .iter()
            .map(|f| format!("--{}", f.flag))
            .collect();
        match all.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => all.join(""),
        }
    }
}

fn port(s: &str) -> Result<String, String> {
    s.parse::<u16>()
        .map(|_| s.to_string())
        .map_err(|_| "give a port (0-65535)".into())
}

fn port_or_off(s: &str) -> Result<String, String> {
    if s.eq_ignore_ascii_case("off") || s.parse::<u16>().is_ok() {
        Ok(s.to_string())
    } else {
        Err("give a port (0-65535; 0 for any free one) or 'off'".into())
    }
}

fn count(s: &str) -> Result<String, String> {
    s.parse::<u64>()
        .map(|_| s.to_string())
        .map_err(|_| "give a whole number, 0 or more".into())
}

fn seconds(s: &str) -> Result<String, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(s.to_string()),
        _ => Err("give a number of seconds above 0".into()),
    }
}

fn arg(f: &'static Flag, requires: Option<&'static str>) -> Arg {
    let help = match &f.default {
        Some(d) => format!("{} [default: {d}]", f.help),
        None => f.help.clone(),
    };
    let mut a = Arg::new(f.flag.as_str()).long(f.flag.as_str()).help(help);
    a = match f.kind {
        Kind::Switch => a.action(ArgAction::SetTrue),
        Kind::Text => a.value_parser(ValueParser::string()),
        Kind::Port => a.value_parser(port),
        Kind::PortOrOff => a.value_parser(port_or_off),
        Kind::Seconds => a.value_parser(seconds),
        Kind::Count => a.value_parser(count),
        Kind::Choice => a.value_parser(PossibleValuesParser::new(
            f.choices.iter().map(String::as_str),
        )),
    };
    if let Some(v) = &f.value {
        a = a.value_name(v.as_str());
    }
    if let Some(r) = requires {
        a = a.requires(r);
    }
    a
}

impl<S: Section> FromArgMatches for Flags<S> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Vec::new();
        for f in S::flags(table()) {
            let id = f.flag.as_str();
            match f.kind {
                Kind::Switch => {
                    if m.get_flag(id) {
                        given.push((id, None));
                    }
                }
                _ => {
                    if let Some(v) = m.get_one::<String>(id) {
                        given.push((id, Some(v.clone())));
                    }
                }
            }
        }
        Ok(Flags {
            given,
            section: PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl<S: Section> Args for Flags<S> {
    fn augment_args(mut cmd: Command) -> Command {
        for f in S::flags(table()) {
            cmd = cmd.arg(arg(f, S::REQUIRES));
        }
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[arg(long)]
        ray: Option<String>,
        #[command(flatten)]
        deploy: Flags<Deploy>,
        #[command(flatten)]
        serve: Flags<Serve>,
        #[command(flatten)]
        bench: Flags<Bench>,
    }

    #[test]
    fn every_flag_of_the_table_is_declared_and_handed_on_as_given() {
        let t = table();
        for f in [&t.deploy, &t.route, &t.cluster, &t.serve, &t.bench]
            .into_iter()
            .flatten()
        {
            assert!(!f.help.is_empty(), "{}", f.flag);
            assert_eq!(
                matches!(f.kind, Kind::Switch),
                f.value.is_none(),
                "{}",
                f.flag
            );
            assert_eq!(
                matches!(f.kind, Kind::Choice),
                !f.choices.is_empty(),
                "{}",
                f.flag
            );
        }
        let cli = Cli::try_parse_from([
            "x",
            "--ray",
            "h:1",
            "--data-plane",
            "handles",
            "--ingress-port",
            "off",
            "--max-context",
            "2048",
            "--detach",
            "--via",
            "proxy",
        ])
        .unwrap();
        let args = |a: Vec<OsString>| {
            a.into_iter()
                .map(|s| s.into_string().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            args(cli.deploy.to_args()),
            [
                "--data-plane",
                "handles",
                "--ingress-port",
                "off",
                "--max-context",
                "2048"
            ]
        );
        assert_eq!(args(cli.serve.to_args()), ["--detach"]);
        assert_eq!(args(cli.bench.to_args()), ["--via", "proxy"]);
        assert!(Cli::try_parse_from(["x", "--data-plane", "shm"]).is_err());
        assert!(Cli::try_parse_from(["x", "--ingress-port", "70000"]).is_err());
        assert!(Cli::try_parse_from(["x", "--max-sequences", "-1"]).is_err());
        assert!(Cli::try_parse_from(["x", "--max-kv-bytes", "1GB"]).is_err());
        assert!(
            Cli::try_parse_from(["x", "--via", "http"]).is_err(),
            "bench's flags need --ray"
        );
        assert_eq!(
            Flags::<Deploy>::names(),
            "--resources, --replicas, --threads, --data-plane, --ingress-port, --max-sequences, --max-context and --max-kv-bytes"
        );
    }
}
