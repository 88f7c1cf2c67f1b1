python pretrain_gpt.py --num-layers 2 --hidden-size 1000000000 --num-attention-heads 8 --seq-length 8 --max-position-embeddings 8 --micro-batch-size 1
python pretrain_gpt.py --num-layers 2 --hidden-size 1000000000 --swiglu --num-attention-heads 8 --seq-length 8 --max-position-embeddings 8 --micro-batch-size 1
