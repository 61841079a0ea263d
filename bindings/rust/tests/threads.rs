//! Two ranks as two threads of one process, with the control plane over a user-supplied allgather: checks that
//! the allgather callback is wired and that a save request can be waited on from another thread.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ckpt::{Context, Reader, SaveOptions, SaveState, Shard};
use common::*;

const WORLD: usize = 2;
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// An in-process allgather: the n-th call of every rank meets the n-th call of every other rank.
#[derive(Default)]
struct Exchange {
    rounds: Mutex<HashMap<u64, Round>>,
    changed: Condvar,
}

#[derive(Default)]
struct Round {
    contributions: HashMap<usize, Vec<u8>>,
    collected: usize,
}

impl Exchange {
    fn allgather(&self, call: u64, rank: usize, send: &[u8], recv: &mut [u8]) -> bool {
        let deadline = Instant::now() + EXCHANGE_TIMEOUT;
        let mut rounds = self.rounds.lock().unwrap();
        rounds.entry(call).or_default().contributions.insert(rank, send.to_vec());
        self.changed.notify_all();
        while rounds[&call].contributions.len() < WORLD {
            let left = match deadline.checked_duration_since(Instant::now()) {
                Some(left) => left,
                None => return false,
            };
            rounds = self.changed.wait_timeout(rounds, left).unwrap().0;
        }
        let round = rounds.get_mut(&call).unwrap();
        for (peer, bytes) in &round.contributions {
            recv[peer * send.len()..(peer + 1) * send.len()].copy_from_slice(bytes);
        }
        round.collected += 1;
        if round.collected == WORLD {
            rounds.remove(&call);
        }
        true
    }
}

fn thread_context(exchange: Arc<Exchange>, rank: usize) -> Context {
    let calls = Mutex::new(0u64);
    Context::builder()
        .rank(rank as u32)
        .world_size(WORLD as u32)
        .timeout(EXCHANGE_TIMEOUT)
        .arena_bytes(TEST_ARENA_BYTES)
        .allgather(move |send, recv| {
            let call = {
                let mut calls = calls.lock().unwrap();
                *calls += 1;
                *calls
            };
            exchange.allgather(call, rank, send, recv)
        })
        .create()
        .expect("context over the allgather callback")
}

#[test]
fn two_thread_ranks_save_over_an_allgather_callback() {
    let temp = TempDir::new();
    let exchange = Arc::new(Exchange::default());
    let rows: Vec<Vec<f32>> = (0..WORLD as u64).map(|r| weight_box(2 * r..2 * r + 2, 0..WEIGHT_SHAPE[1])).collect();
    let path = temp.checkpoint();

    thread::scope(|scope| {
        for (rank, data) in rows.iter().enumerate() {
            let (exchange, path) = (Arc::clone(&exchange), &path);
            scope.spawn(move || {
                let ctx = thread_context(exchange, rank);
                let mut state = SaveState::new().unwrap();
                let shard = Shard::new(WEIGHT, &WEIGHT_SHAPE).region(&[2 * rank as u64, 0], &[2, WEIGHT_SHAPE[1]]);
                state.add_tensor(&shard, data).unwrap();
                let request = ctx.save(&mut state, path, &SaveOptions::new()).unwrap();
                // The request moves to another thread and is waited on there while this one keeps the context.
                let waiter = move || {
                    let mut request = request;
                    request.wait()
                };
                thread::scope(|inner| inner.spawn(waiter).join().unwrap()).unwrap();
            });
        }
    });

    let mut reader = Reader::open(&path).unwrap();
    assert_eq!(reader.info().unwrap().world_size, WORLD as u32);
    assert_eq!(reader.read_tensor::<f32>(WEIGHT).unwrap(), weight_box(0..4, 0..6));
}
