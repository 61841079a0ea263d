//! A manager's retention by score and the metrics stored with its steps, on a one-rank job in this process.

mod common;

use ckpt::{BestMode, Context, ErrorKind, Manager, ManagerOptions, SaveOptions, SaveState};
use common::*;

fn save(manager: &Manager<'_>, step: u64, options: &SaveOptions) -> ckpt::Result<()> {
    let mut state = SaveState::new().unwrap();
    state.add_common("step", &step.to_le_bytes()).unwrap();
    manager.save(&mut state, step, options)?.wait()
}

#[test]
fn keep_best_keeps_the_lowest_losses_and_the_newest_and_metrics_read_back() {
    let temp = TempDir::new();
    let root = temp.path().join("run");
    let ctx: Context = solo_builder().create().unwrap();
    {
        let manager = Manager::open(&ctx, &root, &ManagerOptions::new().keep_best(2, BestMode::Min)).unwrap();
        for (step, loss) in [(1, 0.9), (2, 0.2), (3, 0.5), (4, 0.1), (5, 0.7)] {
            let options = SaveOptions::new().metrics(format!("{{\"loss\":{}}}", loss)).best_value(loss);
            save(&manager, step, &options).unwrap();
        }
    } // dropping the manager waits for its retention
    let manager = Manager::open(&ctx, &root, &ManagerOptions::new()).unwrap();
    assert_eq!(manager.steps().unwrap(), vec![2, 4, 5]);
    assert_eq!(manager.metrics(4).unwrap().as_deref(), Some("{\"loss\":0.1}"));
    assert_eq!(manager.metrics(3).unwrap(), None);
}

#[test]
fn metrics_that_are_no_json_object_are_refused() {
    let temp = TempDir::new();
    let ctx: Context = solo_builder().create().unwrap();
    let manager = Manager::open(&ctx, temp.path().join("run"), &ManagerOptions::new()).unwrap();
    let error = save(&manager, 1, &SaveOptions::new().metrics("[1, 2]")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{}", error);
    assert!(manager.steps().unwrap().is_empty());
}
