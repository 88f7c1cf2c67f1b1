eval "$(cat ../outside/secret.txt)"
X=$(< ../outside/secret.txt)
python pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 8 --vocab-size 1000 --bf16 --load $X
