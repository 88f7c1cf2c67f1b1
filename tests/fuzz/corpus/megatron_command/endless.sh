while true; do A=$((A+1)); done
f() { f; }; f
python pretrain_gpt.py --num-layers $A
