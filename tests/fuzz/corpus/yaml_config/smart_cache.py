# survival-mace-monai settings as the guide writes them
cache_rate = 0.3
replace_rate = 0.2
num_workers = 4
use_smart_cache = True
resnet_depth = 50
spatial = (256, 256, 64)
model_name = "resnet50"
