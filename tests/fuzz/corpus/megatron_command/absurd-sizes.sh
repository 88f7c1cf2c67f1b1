ARGS=(--num-layers 2 --hidden-size $((1<<62)) --num-attention-heads -1 --seq-length 99999999999999999999)
torchrun --nproc-per-node 0 --nnodes=-3 pretrain_gpt.py "${ARGS[@]}" --micro-batch-size 0 --global-batch-size 9223372036854775807
