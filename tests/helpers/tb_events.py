"""Reading a run's TensorBoard folder the way TensorBoard does (its event reader), for the tests of
the RL and critique runs' logs."""
from pathlib import Path


def read_events(logdir: Path):
    """An EventAccumulator over every event file of `logdir`, loaded."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return acc


def hparams(acc) -> dict:
    """The hyperparameters of the HParams plugin's session start, as {name: python value}."""
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2
    content = acc.PluginTagToContent(metadata.PLUGIN_NAME)
    data = plugin_data_pb2.HParamsPluginData.FromString(content[metadata.SESSION_START_INFO_TAG])
    return {k: getattr(v, v.WhichOneof("kind")) for k, v in data.session_start_info.hparams.items()}


def metric_tags(acc) -> list[str]:
    """The metric tags the HParams dashboard sets beside the hyperparameters."""
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2
    content = acc.PluginTagToContent(metadata.PLUGIN_NAME)
    data = plugin_data_pb2.HParamsPluginData.FromString(content[metadata.EXPERIMENT_TAG])
    return [m.name.tag for m in data.experiment.metric_infos]
