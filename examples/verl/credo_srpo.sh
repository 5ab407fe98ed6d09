#!/usr/bin/env bash
# SRPO (credo) with verl 0.9.1 on one node: 32 prompts x 8 rows per step, 4 optimiser steps per rollout
# batch, REINFORCE on separately normalised base/suffix groups, suffix-only masks. Any verl override can be
# appended: bash examples/verl/credo_srpo.sh trainer.total_training_steps=20
# Data: GSM8K parquet files made by examples/data_preprocess/gsm8k.py of verl's repository (or your own with
# the same columns: prompt, data_source, reward_model.ground_truth); rewards: verl's default_compute_score.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
model=${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}
data=${DATA:-$HOME/data/gsm8k}
gpus=${GPUS:-8}

# verl looks estimators, losses and agent loops up in every process it starts (trainer and Ray workers):
# this makes each of them import credo's plugin, which registers the credo_* names.
export VERL_USE_EXTERNAL_MODULES=credo.integrations.verl_plugin

overrides=(
    algorithm.adv_estimator=credo_srpo
    algorithm.use_kl_in_reward=False
    actor_rollout_ref.actor.policy_loss.loss_mode=credo_srpo
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
    actor_rollout_ref.actor.use_kl_loss=False
    actor_rollout_ref.actor.entropy_coeff=0
    actor_rollout_ref.actor.ppo_mini_batch_size=8
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
    actor_rollout_ref.actor.ppo_epochs=1
    actor_rollout_ref.actor.optim.lr=5e-5
    actor_rollout_ref.model.path="$model"
    actor_rollout_ref.model.lora_rank=64
    actor_rollout_ref.model.lora_alpha=128
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n=8
    actor_rollout_ref.rollout.temperature=0.7
    actor_rollout_ref.rollout.top_p=0.95
    actor_rollout_ref.rollout.calculate_log_probs=False
    actor_rollout_ref.rollout.agent.default_agent_loop=credo_srpo
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$here/agent_loops.yaml"
    actor_rollout_ref.rollout.val_kwargs.temperature=0
    data.train_files="$data/train.parquet"
    data.val_files="$data/test.parquet"
    data.train_batch_size=32
    data.max_prompt_length=1024
    data.max_response_length=4096
    trainer.nnodes=1
    trainer.n_gpus_per_node="$gpus"
    trainer.total_training_steps=100
    trainer.logger=[console]
)

python3 -m verl.trainer.main_ppo "${overrides[@]}" "$@"
