//! Each configuration's flags parsed as its child runs will parse them,
//! before anything runs: a value the scenario's parser refuses (`--cleanup
//! locked,bogus`, a flag it does not have) is a usage error naming the
//! configuration at once, not the failure of its first child after every
//! configuration before it in the first round has run. The child's checks
//! past the parser (`--lag` smaller than `--slots`, pre-flight) still run
//! in the child, which is where the host is known.

use anyhow::Result;
use clap::{Args as _, Command};

use super::Config;
use crate::error::usage;

/// The parser of `scenario`'s flags (one of [`super::SCENARIOS`]), as
/// `herd <scenario>` parses them.
fn parser(scenario: &str) -> Option<Command> {
    let cmd = Command::new("herd").no_binary_name(true);
    Some(match scenario {
        "storm" => crate::scenario::storm::Args::augment_args(cmd),
        "agent" => crate::scenario::agent::Args::augment_args(cmd),
        "unregister" => crate::scenario::unregister::Args::augment_args(cmd),
        "gp" => crate::scenario::gp::Args::augment_args(cmd),
        "membarrier" => crate::scenario::membarrier::Args::augment_args(cmd),
        _ => return None,
    })
}

/// Parses every configuration's arguments (with the `--json` each child
/// gets); the first that `scenario` refuses is a usage error naming it.
pub fn check_configs(scenario: &str, configs: &[Config]) -> Result<()> {
    let Some(cmd) = parser(scenario) else {
        return Ok(());
    };
    for c in configs {
        let args = c.args.iter().map(String::as_str).chain(["--json"]);
        if let Err(e) = cmd.clone().try_get_matches_from(args) {
            let first = e
                .to_string()
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or_default()
                .trim_start_matches("error: ")
                .to_string();
            return Err(usage(
                "",
                format!(
                    "configuration `{}`: herd {scenario} refuses its flags ({}): {first}",
                    c.label,
                    c.args.join(" ")
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(label: &str, args: &[&str]) -> Config {
        Config {
            label: label.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_value_the_scenario_refuses_names_its_configuration() {
        let ok = cfg("cleanup=locked", &["--waves", "2", "--cleanup", "locked"]);
        let bad = cfg("cleanup=bogus", &["--waves", "2", "--cleanup", "bogus"]);
        assert!(check_configs("storm", std::slice::from_ref(&ok)).is_ok());
        let e = check_configs("storm", &[ok.clone(), bad]).unwrap_err();
        assert_eq!(crate::error::exit_code_for(&e), 2);
        let m = e.to_string();
        assert!(
            m.starts_with("configuration `cleanup=bogus`: herd storm refuses its flags"),
            "{m}"
        );
        assert!(m.contains("invalid value 'bogus' for '--cleanup"), "{m}");
        // Every scenario's own flags.
        for (scenario, flags) in [
            ("agent", &["--jobs", "10"][..]),
            ("unregister", &["--sync", "deferred"][..]),
            ("gp", &[][..]),
            ("membarrier", &[][..]),
        ] {
            assert!(
                check_configs(scenario, &[cfg("x", flags)]).is_ok(),
                "{scenario}"
            );
            let e = check_configs(scenario, &[cfg("x", &["--no-such-flag"])]).unwrap_err();
            assert!(e.to_string().contains("--no-such-flag"), "{scenario}: {e}");
        }
    }
}
