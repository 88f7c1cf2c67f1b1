python pretrain_gpt.py --num-layers "24
